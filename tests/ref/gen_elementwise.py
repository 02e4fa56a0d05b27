#!/usr/bin/python3
"""Writes tests/ref/elementwise_ref.h: inputs and PyTorch outputs of the
unary and binary elementwise ops, for tests/ops/test_unary.c and
test_binary.c. Run: /usr/bin/python3 tests/ref/gen_elementwise.py

f16/bf16 references are computed as oar defines them (and PyTorch's CPU
kernels do): the op in f32 on the half-rounded input, rounded back."""
import math
import os

import torch
import torch.nn.functional as F

OAR = {torch.bool: "OAR_BOOL", torch.uint8: "OAR_U8", torch.int32: "OAR_I32",
       torch.int64: "OAR_I64", torch.float16: "OAR_F16", torch.bfloat16: "OAR_BF16",
       torch.float32: "OAR_F32", torch.float64: "OAR_F64", torch.complex64: "OAR_C64",
       torch.complex128: "OAR_C128"}
HALF = (torch.float16, torch.bfloat16)
FL = [torch.float32, torch.float64]
FLH = FL + list(HALF)
CX = [torch.complex64, torch.complex128]
b, u8, i32, i64 = torch.bool, torch.uint8, torch.int32, torch.int64
nan, inf = math.nan, math.inf

# input sets
R = [-2.5, -1.5, -0.75, -0.5, 0.0, 0.25, 0.5, 0.875, 1.0, 1.5, 2.5, 7.0]
S = [nan, inf, -inf, -0.0, 1.0, -3.0]
I = [-7, -3, -1, 0, 1, 2, 5, 100]
U = [0, 1, 2, 5, 7, 100, 200, 255]
B = [0, 1, 1, 0]
Z = [1 + 2j, -0.5 + 0.25j, 0.5 - 1j, 3 + 0.5j, -1.5 - 0.5j, 0.25 + 0.75j]
ZS = [complex(nan, 0), complex(0, inf), complex(-inf, 1), 1 + 1j, 0j]


def inputs_for(dtype, real=R, special=False):
    if dtype == b:
        return B
    if dtype == u8:
        return U
    if dtype in (i32, i64):
        return I
    if dtype in CX:
        return ZS if special else Z
    return S if special else real


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def clamp_i(x):
    return torch.clamp(x, 2, 100) if x.dtype == u8 else torch.clamp(x, -2, 3)


# name -> (torch fn, dtypes, special inputs too?)
UNARY = [
    ("neg", torch.neg, FLH + [i32, i64] + CX, False),
    ("abs", torch.abs, FLH + [u8, i32, i64] + CX, True),
    ("sign", lambda x: torch.sgn(x) if x.is_complex() else torch.sign(x),
     FLH + [b, u8, i32, i64] + CX, True),
    ("exp", torch.exp, FLH + [b, i64] + CX, False),
    ("exp2", torch.exp2, FLH + [i32], False),
    ("log", torch.log, FLH + [i64] + CX, False),
    ("log2", torch.log2, FL + [i64] + CX, False),
    ("log1p", torch.log1p, FLH, False),
    ("expm1", torch.expm1, FLH, False),
    ("sqrt", torch.sqrt, FLH + [i32] + CX, False),
    ("rsqrt", torch.rsqrt, FL + CX, False),
    ("square", torch.square, FLH + [u8, i32, i64] + CX, False),
    ("reciprocal", torch.reciprocal, FL + [i64] + CX, False),
    ("sin", torch.sin, FLH + [i64] + CX, False),
    ("cos", torch.cos, FL + CX, False),
    ("tan", torch.tan, FL + CX, False),
    ("asin", torch.asin, FL + CX, False),
    ("acos", torch.acos, FL + CX, False),
    ("atan", torch.atan, FL + CX, False),
    ("sinh", torch.sinh, FL + CX, False),
    ("cosh", torch.cosh, FL + CX, False),
    ("tanh", torch.tanh, FLH + CX, False),
    ("sigmoid", torch.sigmoid, FLH + CX, False),
    ("relu", torch.relu, FLH + [i32, i64], True),
    ("relu6", F.relu6, FLH + [u8, i32, i64], True),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.1), FLH, False),
    ("elu", lambda x: F.elu(x, 1.5), FLH, False),
    ("gelu", F.gelu, FLH, False),
    ("gelu_tanh", gelu_tanh, FLH, False),
    ("gelu_grad", lambda x: torch.ops.aten.gelu_backward(torch.ones_like(x), x), FLH, True),
    ("silu", F.silu, FLH, False),
    ("softplus", lambda x: F.softplus(x, 2.0, 5.0), FLH, False),
    ("erf", torch.erf, FLH, False),
    ("floor", torch.floor, FLH + [i64], True),
    ("ceil", torch.ceil, FLH + [i32], True),
    ("round", torch.round, FLH + [u8, i64], True),
    ("trunc", torch.trunc, FLH, True),
    ("clamp", lambda x: torch.clamp(x, -0.5, 0.7), FLH, True),
    ("clamp_max", lambda x: torch.clamp(x, max=0.5), FL, True),
    ("clamp_int", clamp_i, [u8, i32, i64], False),
    ("clamp_frac", lambda x: torch.clamp(x, min=0.5), [i64], False),
    ("isnan", torch.isnan, FLH + [b, i64] + CX, True),
    ("isinf", torch.isinf, FLH + [i32] + CX, True),
    ("logical_not", torch.logical_not, FL + [b, i64] + CX, True),
    ("real", torch.real, [torch.float32] + CX, False),
    ("imag", torch.imag, CX, False),
    ("conj", lambda x: torch.conj(x).resolve_conj(), [torch.float32, i64] + CX, False),
    ("angle", torch.angle, FL + [i64] + CX, True),
    ("hardswish", F.hardswish, FLH, True),
]

A2 = [-7.0, -3.5, -1.0, 0.0, 2.5, 5.0, 7.0, 3.0, 0.5, -2.0]
B2 = [2.0, -2.0, 3.0, -1.5, 2.0, -3.0, 0.5, 3.0, 0.25, -0.75]
IA = [-7, -3, -1, 0, 5, 7, 3, 9, -8, 6]
IB = [2, -2, 3, -1, -3, 3, 3, 4, 3, -4]
IP = [2, 3, -3, 5, 1, 2, -1, 3, 2, 0]     # integer exponents, some negative
PA = [0.5, 2.0, 3.0, 0.0, 1.5, 4.0, 0.25, 7.0, 2.5, 1.0]
UA = [0, 7, 200, 255, 13, 100, 3, 1, 9, 250]
UB = [1, 2, 100, 1, 5, 200, 3, 255, 2, 10]
BA = [0, 1, 0, 1]
BB = [0, 0, 1, 1]
ZA = [1 + 2j, -0.5 + 0.25j, 0 - 1j, 3 + 0.5j, -1.5 - 0.5j, 0.25 + 0.75j]
ZB = [0.5 - 1j, 2 + 0j, -1 + 1j, 3 + 0.5j, 0.25 + 2j, -0.5 - 0.5j]
NA = [nan, 1.0, -inf, 2.0, 1.0, -1.0, 5.5, 0.0]   # NaN/inf/zero divisors
NB = [1.0, nan, 3.0, inf, 0.0, 0.0, -0.0, 0.0]


def pairs(dtype, kind="std"):
    if dtype == b:
        return BA, BB
    if dtype == u8:
        return UA, UB
    if dtype in (i32, i64):
        return (IA, IP) if kind == "pow" else (IA, IB)
    if dtype in CX:
        return ZA, ZB
    if kind == "pow":
        return PA, B2
    if kind == "special":
        return NA, NB
    return A2, B2


BINARY = [
    ("add", torch.add, FLH + [b, u8, i32, i64] + CX, False),
    ("sub", torch.sub, FLH + [u8, i32, i64] + CX, False),
    ("mul", torch.mul, FLH + [b, u8, i32, i64] + CX, False),
    ("div", torch.div, FLH + [i64] + CX, True),
    ("floor_div", torch.floor_divide, FLH + [u8, i32, i64], True),
    ("remainder", torch.remainder, FLH + [u8, i32, i64], True),
    ("pow", torch.pow, FLH + [u8, i32, i64] + CX, False),
    ("atan2", torch.atan2, FLH + [i64], True),
    ("maximum", torch.maximum, FLH + [b, u8, i32, i64], True),
    ("minimum", torch.minimum, FLH + [b, i32, i64], True),
    ("eq", torch.eq, FLH + [b, i64] + CX, True),
    ("ne", torch.ne, FL + [b, i32] + CX, True),
    ("lt", torch.lt, FLH + [b, u8, i64], True),
    ("le", torch.le, FL + [i32], True),
    ("gt", torch.gt, FL + [b, i64], True),
    ("ge", torch.ge, FL + [i32], True),
    ("logical_and", torch.logical_and, FL + [b, i64] + CX, False),
    ("logical_or", torch.logical_or, FL + [b, i64] + CX, False),
    ("logical_xor", torch.logical_xor, FL + [b, i64] + CX, False),
]
# mixed-dtype pairs: (op, a dtype, b dtype)
MIXED = [("add", i64, torch.float32), ("mul", i32, torch.float64), ("add", torch.float16, torch.bfloat16),
         ("sub", torch.float32, torch.complex64), ("div", i32, i64), ("pow", torch.float32, i64),
         ("maximum", u8, i32), ("lt", i64, torch.float32), ("eq", torch.float64, torch.complex128),
         ("floor_div", i32, i64), ("mul", b, torch.float32), ("atan2", i32, torch.float64)]


class Out:
    def __init__(self):
        self.arrays = {}
        self.lines = []

    def array(self, vals):
        key = tuple(repr(v) for v in vals)
        if key not in self.arrays:
            name = "ew_v%d" % len(self.arrays)
            self.arrays[key] = name
            body = ", ".join(cnum(v) for v in vals)
            self.lines.append("static const double %s[] = {%s};" % (name, body))
        return self.arrays[key]


def cnum(v):
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    r = repr(v)
    return r if ("." in r or "e" in r) else r + ".0"


def make(vals, dtype):
    """The input as torch makes it in dtype (values rounded to it)."""
    if dtype in CX:
        return torch.tensor(vals, dtype=torch.complex128).to(dtype)
    if dtype == b:
        return torch.tensor(vals, dtype=torch.float64).to(b)
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def split(t):
    """re, im (or None) of a tensor as lists of doubles."""
    if t.is_complex():
        t = t.to(torch.complex128)
        return t.real.tolist(), t.imag.tolist()
    return t.to(torch.float64).tolist(), None


def compute(fn, *xs):
    half = [x.dtype for x in xs if x.dtype in HALF]
    if half and all(x.dtype in HALF or not x.is_floating_point() for x in xs):
        # computed in f32, rounded to the result's half dtype
        want = torch.promote_types(xs[0].dtype, xs[-1].dtype)
        r = fn(*[x.float() if x.dtype in HALF else x for x in xs])
        return r.to(want) if r.is_floating_point() else r
    return fn(*xs)


def case(out, name, xs, r):
    fields = ['"%s"' % name]
    for k in range(2):
        if k < len(xs):
            re, im = split(xs[k])
            fields += [OAR[xs[k].dtype], out.array(re), out.array(im) if im is not None else "NULL"]
        else:
            fields += ["OAR_BOOL", "NULL", "NULL"]
    re, im = split(r)
    fields += [OAR[r.dtype], str(len(re)), out.array(re), out.array(im) if im is not None else "NULL"]
    return "    {" + ", ".join(fields) + "},"


def main():
    out = Out()
    ucases, bcases = [], []
    for name, fn, dtypes, special in UNARY:
        for dt in dtypes:
            sets = [False, True] if special and dt not in (b, u8, i32, i64) else [False]
            if name == "sign" and dt in CX:
                sets = [False]  # z/|z| of infinite z: PyTorch's NaN pattern is its own
            for sp in sets:
                x = make(inputs_for(dt, special=sp), dt)
                ucases.append(case(out, name, [x], compute(fn, x)))
    for name, fn, dtypes, special in BINARY:
        kind = "pow" if name == "pow" else "std"
        for dt in dtypes:
            sets = [kind] + (["special"] if special and dt in FLH else [])
            for k in sets:
                va, vb = pairs(dt, k)
                x, y = make(va, dt), make(vb, dt)
                bcases.append(case(out, name, [x, y], compute(fn, x, y)))
    fns = {n: f for n, f, _, _ in BINARY}
    for name, da, db in MIXED:
        va = pairs(da, "pow" if name == "pow" else "std")[0]
        vb = pairs(db, "pow" if name == "pow" else "std")[1]
        if name == "pow":
            va = PA
        m = min(len(va), len(vb))
        va, vb = va[:m], vb[:m]
        x, y = make(va, da), make(vb, db)
        bcases.append(case(out, name, [x, y], compute(fns[name], x, y)))

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elementwise_ref.h")
    with open(path, "w") as f:
        f.write("/* Generated by tests/ref/gen_elementwise.py (torch %s); do not edit.\n"
                " * Inputs and PyTorch outputs of the elementwise ops; complex values\n"
                " * as separate real and imaginary arrays (im NULL: real dtype). */\n"
                % torch.__version__.split("a")[0])
        f.write("#ifndef OAR_TEST_ELEMENTWISE_REF_H\n#define OAR_TEST_ELEMENTWISE_REF_H\n\n")
        f.write("#include <math.h>\n#include <stddef.h>\n\n")
        f.write("typedef struct ew_case {\n    const char *op;\n"
                "    int a_dtype;\n    const double *a_re, *a_im;\n"
                "    int b_dtype;               /* unary: b_re NULL */\n    const double *b_re, *b_im;\n"
                "    int out_dtype;\n    int n;\n    const double *want_re, *want_im;\n} ew_case;\n\n")
        f.write("\n".join(out.lines) + "\n\n")
        f.write("__attribute__((unused)) static const ew_case ew_unary_cases[] = {\n")
        f.write("\n".join(ucases) + "\n};\n\n")
        f.write("__attribute__((unused)) static const ew_case ew_binary_cases[] = {\n")
        f.write("\n".join(bcases) + "\n};\n\n#endif\n")
    print("wrote %s: %d unary, %d binary cases" % (path, len(ucases), len(bcases)))


if __name__ == "__main__":
    main()
