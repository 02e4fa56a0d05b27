#!/usr/bin/python3
"""Writes tests/ref/reduce_ref.h: inputs and PyTorch (1.13) results of the
reductions and scans for tests/ops/test_reduce.c. Deterministic: rerun from
the repo root with /usr/bin/python3 tests/ref/gen_reduce.py."""
import os

import torch

torch.manual_seed(0)
out = []
cases = []  # (op, input name, dims, correction/p, want name, want_im name or None, n)


def fmt(v):
    if v != v:
        return "NAN"
    if v in (float("inf"), float("-inf")):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(float(v))


def emit(name, t):
    vals = t.detach().reshape(-1).double().tolist()
    body = ", ".join(fmt(v) for v in vals)
    out.append("static const double %s[%d] = {%s};" % (name, max(len(vals), 1), body or "0"))


# x: [3, 4, 5] with two-decimal values (exact in the C header as doubles)
x = (torch.randn(3, 4, 5, dtype=torch.float64) * 100).round() / 100
emit("ref_x", x)
# xi: integers in [-3, 3]
xi = torch.randint(-3, 4, (3, 4, 5))
emit("ref_xi", xi)
# xc: complex [2, 3]
xc = torch.complex((torch.randn(2, 3, dtype=torch.float64) * 100).round() / 100,
                   (torch.randn(2, 3, dtype=torch.float64) * 100).round() / 100)
xc[1, 2] = 0  # a zero for all/any and the products
xc[0, 1] = complex(0, 1.5)  # non-zero through its imaginary part only
emit("ref_xc_re", xc.real)
emit("ref_xc_im", xc.imag)

DIMS = [(), (0,), (1,), (2,), (-1,), (0, 2), (2, 0), (1, 2), (0, 1), (0, 1, 2)]
k = [0]


def case(op, src, t, dims, res, param=0.0):
    name = "ref_w%d" % k[0]
    k[0] += 1
    if res.is_complex():
        emit(name, res.real)
        emit(name + "_im", res.imag)
        im = name + "_im"
    else:
        emit(name, res)
        im = None
    cases.append((op, src, dims, param, name, im, res.numel()))


def dd(t, dims):
    return list(dims) if dims else list(range(t.dim()))


for src, t in (("x", x), ("xp", x.permute(2, 0, 1))):
    for dims in DIMS:
        d = dd(t, dims)
        case("sum", src, t, dims, t.sum(d))
        case("prod", src, t, dims, t.prod() if len(d) == 3 else
             t.prod(d[0]) if len(d) == 1 else t.prod(d[0], keepdim=True).prod(d[1]).squeeze())
        case("amax", src, t, dims, t.amax(d))
        case("amin", src, t, dims, t.amin(d))
        case("mean", src, t, dims, t.mean(d))
        case("var0", src, t, dims, t.var(d, unbiased=False))
        case("var1", src, t, dims, t.var(d, unbiased=True))
        case("std1", src, t, dims, t.std(d, unbiased=True))
        case("logsumexp", src, t, dims, t.logsumexp(d))
        case("norm1", src, t, dims, t.norm(1, d))
        case("norm2", src, t, dims, t.norm(2, d))
        case("norminf", src, t, dims, t.norm(float("inf"), d))
        case("all", src, t, dims, (t > -1.5).all(d[0]) if len(d) == 1 else
             (t > -1.5).flatten().all() if len(d) == 3 else (t > -1.5).all(d[0]).all(d[1] - 1 if d[1] > d[0] else d[1]))
        case("any", src, t, dims, (t > 1.5).any(d[0]) if len(d) == 1 else
             (t > 1.5).flatten().any() if len(d) == 3 else (t > 1.5).any(d[0]).any(d[1] - 1 if d[1] > d[0] else d[1]))
    for dim in (0, 1, 2, -1):
        case("argmax", src, t, (dim,), t.argmax(dim))
        case("argmin", src, t, (dim,), t.argmin(dim))
        case("cumsum", src, t, (dim,), t.cumsum(dim))
        case("cumprod", src, t, (dim,), t.cumprod(dim))
    case("argmax", src, t, (), t.argmax())
    case("argmin", src, t, (), t.argmin())

# integers: sum/prod give int64, amax keeps the dtype
for dims in [(), (0,), (2,), (0, 2)]:
    d = dd(xi, dims)
    case("sum", "xi", xi, dims, xi.sum(d))
    case("amax", "xi", xi, dims, xi.amax(d))
    case("amin", "xi", xi, dims, xi.amin(d))
for dim in (0, 2):
    case("prod", "xi", xi, (dim,), xi.prod(dim))
    case("argmax", "xi", xi, (dim,), xi.argmax(dim))
    case("argmin", "xi", xi, (dim,), xi.argmin(dim))
    case("cumsum", "xi", xi, (dim,), xi.cumsum(dim))
    case("cumprod", "xi", xi, (dim,), xi.cumprod(dim))
xb = xi > 0
for dims in [(), (1,), (0, 2)]:
    d = dd(xb, dims)
    case("sum", "xb", xb, dims, xb.sum(d))
    case("all", "xb", xb, dims, xb.all(d[0]) if len(d) == 1 else xb.flatten().all() if len(d) == 3
         else xb.all(2).all(0))
    case("any", "xb", xb, dims, xb.any(d[0]) if len(d) == 1 else xb.flatten().any() if len(d) == 3
         else xb.any(2).any(0))

# complex
for dims in [(), (0,), (1,)]:
    d = dd(xc, dims)
    case("sum", "xc", xc, dims, xc.sum(d))
    case("mean", "xc", xc, dims, xc.mean(d))
    case("prod", "xc", xc, dims, xc.prod() if len(d) == 2 else xc.prod(d[0]))
    case("var1", "xc", xc, dims, xc.var(d, unbiased=True))
    case("norm2", "xc", xc, dims, xc.norm(2, d))
    case("norm1", "xc", xc, dims, xc.norm(1, d))
for dim in (0, 1):
    case("cumsum", "xc", xc, (dim,), xc.cumsum(dim))
    case("cumprod", "xc", xc, (dim,), xc.cumprod(dim))
    # torch 1.13's all() drops the imaginary part (a bug fixed later); x != 0 is the meaning
    case("all", "xc", xc, (dim,), (xc != 0).all(dim))
    case("any", "xc", xc, (dim,), (xc != 0).any(dim))

# f16 / bf16: torch accumulates in f32 and rounds once
for hname, hdt in (("xh", torch.float16), ("xbf", torch.bfloat16)):
    xh = (x * 10).to(hdt)
    for dims in [(), (0,), (2,)]:
        d = dd(xh, dims)
        case("sum", hname, xh, dims, xh.sum(d))
        case("mean", hname, xh, dims, xh.mean(d))
        case("amax", hname, xh, dims, xh.amax(d))
        case("var1", hname, xh, dims, xh.var(d))
    case("cumsum", hname, xh, (2,), xh.float().cumsum(2).to(hdt))  # no half cumsum in torch 1.13
    case("argmax", hname, xh, (1,), xh.argmax(1))

ops = sorted({c[0] for c in cases})
lines = ["/* Generated by tests/ref/gen_reduce.py with PyTorch %s; do not edit. */" % torch.__version__,
         "#ifndef REDUCE_REF_H", "#define REDUCE_REF_H", "#include <math.h>", "#include <stdint.h>", ""]
lines += out
lines.append("")
lines.append("typedef struct { const char *op, *src; int ndims; int64_t dims[3]; int64_t n;"
             " const double *want, *want_im; } reduce_case;")
lines.append("static const reduce_case ref_cases[] = {")
for op, src, dims, _, name, im, n in cases:
    dl = ", ".join(str(d) for d in dims) or "0"
    lines.append('    {"%s", "%s", %d, {%s}, %d, %s, %s},' % (op, src, len(dims), dl, n, name, im or "NULL"))
lines.append("};")
lines.append("#define REF_N_CASES ((int)(sizeof ref_cases / sizeof ref_cases[0]))")
lines.append("#endif")
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reduce_ref.h")
with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
print("wrote %s: %d cases" % (path, len(cases)))
