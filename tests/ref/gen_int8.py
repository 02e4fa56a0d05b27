#!/usr/bin/python3
"""Writes tests/ref/int8_ref.h: PyTorch (1.13, x86 CPU) values for the int8
dtype and quantization tests (tests/ops/test_int8.c): casts to and from
int8 for every dtype, promotion with int8, int8 arithmetic and reductions,
quantize/dequantize per tensor and per channel, fake quantization and its
straight-through gradient. Deterministic: rerun from the repo root with
/usr/bin/python3 tests/ref/gen_int8.py."""
import os

import torch

torch.manual_seed(0)
out = []


def fmt(v):
    if v != v:
        return "NAN"
    if v in (float("inf"), float("-inf")):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(float(v))


def emit(name, t):
    vals = t.detach().reshape(-1).double().tolist() if torch.is_tensor(t) else list(t)
    out.append("static const double %s[%d] = {%s};" % (name, max(len(vals), 1),
                                                      ", ".join(fmt(v) for v in vals) or "0"))


# ---- casts: the source values of each dtype, their int8 casts, and int8 to each dtype.
# oar's dtype order: bool u8 i32 i64 f16 bf16 f32 f64 c64 c128 i8.
DT = [("bool", torch.bool), ("u8", torch.uint8), ("i32", torch.int32), ("i64", torch.int64),
      ("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32),
      ("f64", torch.float64), ("c64", torch.complex64), ("c128", torch.complex128),
      ("i8", torch.int8)]
floats = [0.0, -0.0, 0.4, -0.6, 1.5, -1.5, 2.5, 127.9, 128.0, -128.9, -129.0, 255.5, 256.0,
          300.7, -300.7, 1000.0, 65504.0, 3e9, -3e9, 1e10, float("nan"), float("inf"),
          float("-inf"), 2147483520.0, 4294967301.0]
ints = [0, 1, -1, 127, 128, -128, -129, 255, 256, 300, -300, 65535, 2147483647, -2147483648]
i64s = ints + [2**40 + 3, -(2**40) - 5, 2**62 + 129, -(2**63)]
for name, dt in DT:
    if dt == torch.bool:
        src = torch.tensor([True, False, True])
    elif dt == torch.uint8:
        src = torch.tensor([0, 1, 127, 128, 200, 255], dtype=torch.int64).to(dt)
    elif dt == torch.int8:
        src = torch.tensor([0, 1, -1, 127, -128, 64, -65], dtype=torch.int8)
    elif dt in (torch.int32,):
        src = torch.tensor(ints, dtype=torch.int64).to(dt)
    elif dt == torch.int64:
        src = torch.tensor(i64s, dtype=torch.int64)
    elif dt.is_complex:
        src = torch.tensor([complex(v, 0.5) for v in floats if v == v], dtype=dt)
    else:
        src = torch.tensor(floats, dtype=torch.float64).to(dt)
    # the source values exactly (i64 beyond 2^53 as hi/lo 32-bit halves)
    if dt == torch.int64:
        emit("cast_src_%s_hi" % name, [v >> 32 for v in src.tolist()])
        emit("cast_src_%s_lo" % name, [v & 0xffffffff for v in src.tolist()])
    elif dt.is_complex:
        emit("cast_src_%s" % name, src.real)
        emit("cast_src_%s_im" % name, src.imag)
    else:
        emit("cast_src_%s" % name, src.to(torch.float64) if dt != torch.bool else src.double())
    emit("cast_to_i8_from_%s" % name, src.to(torch.int8))
i8_all = torch.arange(-128, 128, dtype=torch.int64).to(torch.int8)
for name, dt in DT:
    r = i8_all.to(dt)
    emit("cast_from_i8_to_%s" % name, r.real if dt.is_complex else r)

# ---- promotion: torch.promote_types(int8, each); i16 has no oar dtype (oar: i32)
prom = []
for name, dt in DT:
    p = torch.promote_types(torch.int8, dt)
    prom.append([n for n, d in DT if d == p][0] if p != torch.int16 else "i16")
out.append("static const char *const promote_i8_with[%d] = {%s};" % (
    len(prom), ", ".join('"%s"' % p for p in prom)))

# ---- arithmetic and reductions on int8 (wrapping)
a = torch.tensor([[-128, -100, -7, -1, 0], [1, 5, 64, 100, 127]], dtype=torch.int8)
b = torch.tensor([[-1, 3, 2, -2, 7], [127, -128, 3, 100, -5]], dtype=torch.int8)
emit("ew_a", a)
emit("ew_b", b)
emit("ew_add", a + b)
emit("ew_sub", a - b)
emit("ew_mul", a * b)
emit("ew_neg", -a)
emit("ew_abs", a.abs())
emit("ew_sign", a.sign())
emit("ew_maximum", torch.maximum(a, b))
emit("ew_minimum", torch.minimum(a, b))
emit("ew_floor_divide", torch.div(a, b, rounding_mode="floor"))
emit("ew_remainder", torch.remainder(a, b))
emit("ew_lt", a < b)
emit("ew_eq", a == b)
emit("ew_div", a / b)
emit("ew_add_u8", a + b.to(torch.uint8))  # torch: int16; oar: int32, same values
emit("ew_mm", a.t().to(torch.int64).mm(b.to(torch.int64)).to(torch.int8))  # torch has no int8 mm on CPU in 1.13? wraps as int8
emit("red_sum", a.sum(1))
emit("red_prod", a.prod(1))
emit("red_amax", a.amax(1))
emit("red_amin", a.amin(0))
emit("red_argmax", a.argmax(1))
emit("red_argmin", a.argmin(1))
emit("red_cumsum", a.cumsum(1))
emit("red_sort", a.sort(1).values)
emit("red_any", (a.reshape(-1)[3:6]).any().reshape(1))

# ---- quantize / dequantize
x = torch.randn(2, 3, 4) * 3
x[0, 0, :4] = torch.tensor([0.25, 0.75, -0.25, 1.25])  # ties at scale 0.5: half to even
x[1, 2, :3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
x[1, 1, 0] = 1e10
emit("q_x", x)
for dtn, dt, zp in (("i8", torch.qint8, -3), ("u8", torch.quint8, 130)):
    q = torch.quantize_per_tensor(x, 0.5, zp, dt)
    emit("q_pt_%s" % dtn, q.int_repr())
    emit("dq_pt_%s" % dtn, q.dequantize())
    q = torch.quantize_per_tensor(x, 0.1, zp, dt)  # 0.1: not exact in float
    emit("q_pt01_%s" % dtn, q.int_repr())
    emit("dq_pt01_%s" % dtn, q.dequantize())
scales = torch.tensor([0.05, 0.3, 0.7], dtype=torch.float64)
zps_i8 = torch.tensor([0, -10, 25])
zps_u8 = torch.tensor([128, 0, 200])
emit("q_scales", scales)
emit("q_zps_i8", zps_i8)
emit("q_zps_u8", zps_u8)
for dtn, dt, zps in (("i8", torch.qint8, zps_i8), ("u8", torch.quint8, zps_u8)):
    q = torch.quantize_per_channel(x, scales, zps, 1, dt)
    emit("q_pc_%s" % dtn, q.int_repr())
    emit("dq_pc_%s" % dtn, q.dequantize())
    q = torch.quantize_per_channel(x.permute(2, 1, 0).contiguous(), scales, zps, 1, dt)  # a middle axis of [4,3,2]
    emit("q_pcT_%s" % dtn, q.int_repr())

# ---- fake quantization, forward and the straight-through gradient
xf = torch.linspace(-4, 4, 24).reshape(2, 3, 4).clone()
xf[0, 0, 0] = 0.25
xf[1, 2, 3] = float("nan")
xf.requires_grad_(True)
w = torch.arange(1, 25, dtype=torch.float32).reshape(2, 3, 4) / 8
emit("fq_x", xf)
emit("fq_w", w)
y = torch.fake_quantize_per_tensor_affine(xf, 0.25, 2, -8, 7)
(g,) = torch.autograd.grad((y * w).nan_to_num().sum(), xf)
emit("fq_pt_y", y)
emit("fq_pt_g", g)
fs = torch.tensor([0.1, 0.5, 0.3])
fz = torch.tensor([0, 3, -2], dtype=torch.int32)
emit("fq_scales", fs)
emit("fq_zps", fz)
y = torch.fake_quantize_per_channel_affine(xf, fs, fz, 1, -10, 10)
(g,) = torch.autograd.grad((y * w).nan_to_num().sum(), xf)
emit("fq_pc_y", y)
emit("fq_pc_g", g)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "int8_ref.h")
with open(path, "w") as f:
    f.write("/* Generated by tests/ref/gen_int8.py with PyTorch %s; do not edit. */\n" % torch.__version__)
    f.write("#ifndef INT8_REF_H\n#define INT8_REF_H\n#include <math.h>\n\n")
    f.write("\n".join(out))
    f.write("\n\n#endif\n")
print("wrote", path)
