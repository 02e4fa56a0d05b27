#!/usr/bin/python3
"""Reference values for tests/ops/test_conv.c and test_norm.c, computed with
PyTorch in float64. Run: /usr/bin/python3 tests/ref/gen_conv_norm.py
(writes tests/ref/conv_norm_ref.h next to this script; deterministic)."""
import os
import torch
import torch.nn.functional as F

torch.manual_seed(1234)
out = []


def emit(name, t):
    t = t.detach().to(torch.float64).contiguous().reshape(-1)
    vals = ", ".join(repr(v) for v in t.tolist())  # shortest exact round-trip
    out.append("static const double %s[%d] = {%s};" % (name, max(t.numel(), 1), vals or "0"))


def rnd(*shape):
    return torch.randn(*shape, dtype=torch.float64)


# ---- conv2d ------------------------------------------------------------------
x = rnd(2, 3, 7, 6).requires_grad_()
w = rnd(4, 3, 3, 2).requires_grad_()
b = rnd(4).requires_grad_()
y = F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2))
gy = rnd(*y.shape)
y.backward(gy)
emit("c1_x", x); emit("c1_w", w); emit("c1_b", b); emit("c1_y", y); emit("c1_gy", gy)
emit("c1_gx", x.grad); emit("c1_gw", w.grad); emit("c1_gb", b.grad)
emit("c1_x_nhwc", x.permute(0, 2, 3, 1))  # the same x stored channels-last

x = rnd(2, 4, 5, 5).requires_grad_()
w = rnd(6, 2, 3, 3).requires_grad_()
y = F.conv2d(x, w, None, stride=1, padding=1, groups=2)
gy = rnd(*y.shape)
y.backward(gy)
emit("c2_x", x); emit("c2_w", w); emit("c2_y", y); emit("c2_gy", gy)
emit("c2_gx", x.grad); emit("c2_gw", w.grad)

x = rnd(2, 3, 4, 4)
w = rnd(5, 3, 1, 1)
b = rnd(5)
emit("c3_x", x); emit("c3_w", w); emit("c3_b", b); emit("c3_y", F.conv2d(x, w, b))

# conv1d, groups 3
x = rnd(2, 3, 10)
w = rnd(6, 1, 3)
b = rnd(6)
emit("c4_x", x); emit("c4_w", w); emit("c4_b", b)
emit("c4_y", F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=3))

# conv_transpose2d
x = rnd(2, 4, 3, 4).requires_grad_()
w = rnd(4, 3, 2, 3).requires_grad_()
b = rnd(3).requires_grad_()
y = F.conv_transpose2d(x, w, b, stride=(2, 3), padding=(1, 0), output_padding=(1, 2))
gy = rnd(*y.shape)
y.backward(gy)
emit("t1_x", x); emit("t1_w", w); emit("t1_b", b); emit("t1_y", y); emit("t1_gy", gy)
emit("t1_gx", x.grad); emit("t1_gw", w.grad)

x = rnd(1, 4, 3, 3)
w = rnd(4, 2, 3, 3)
emit("t2_x", x); emit("t2_w", w)
emit("t2_y", F.conv_transpose2d(x, w, None, stride=2, padding=1, output_padding=(0, 1), groups=2, dilation=2))

# ---- pools ---------------------------------------------------------------------
x = rnd(2, 3, 7, 8).requires_grad_()
y, idx = F.max_pool2d(x, (3, 2), (2, 2), (1, 1), (1, 2), ceil_mode=True, return_indices=True)
gy = rnd(*y.shape)
y.backward(gy)
emit("m1_x", x); emit("m1_y", y); emit("m1_idx", idx); emit("m1_gy", gy); emit("m1_gx", x.grad)
out.append("#define M1_OH %d\n#define M1_OW %d" % (y.shape[2], y.shape[3]))
y, idx = F.max_pool2d(x.detach(), 2, 2, 0, 1, ceil_mode=False, return_indices=True)
emit("m2_y", y); emit("m2_idx", idx)

x = rnd(2, 2, 7, 6).requires_grad_()
y = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
gy = rnd(*y.shape)
y.backward(gy)
emit("a1_x", x); emit("a1_y", y); emit("a1_gy", gy); emit("a1_gx", x.grad)
out.append("#define A1_OH %d\n#define A1_OW %d" % (y.shape[2], y.shape[3]))
emit("a2_y", F.avg_pool2d(x.detach(), 3, 2, 1, ceil_mode=True, count_include_pad=True))
emit("a3_y", F.avg_pool2d(x.detach(), (2, 3), (1, 2), (1, 0), ceil_mode=False))

x = rnd(2, 3, 7, 5).requires_grad_()
y = F.adaptive_avg_pool2d(x, (3, 4))
gy = rnd(*y.shape)
y.backward(gy)
emit("p1_x", x); emit("p1_y", y); emit("p1_gy", gy); emit("p1_gx", x.grad)
emit("p2_y", F.adaptive_avg_pool2d(x.detach(), (9, 7)))

# ---- interpolate -----------------------------------------------------------------
x = rnd(1, 2, 4, 5).requires_grad_()
emit("i_x", x)
emit("i1_y", F.interpolate(x.detach(), size=(7, 3), mode="nearest"))
emit("i2_y", F.interpolate(x.detach(), size=(8, 10), mode="nearest"))
y = F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False)
gy = rnd(*y.shape)
y.backward(gy)
emit("i3_y", y); emit("i3_gy", gy); emit("i3_gx", x.grad)
emit("i4_y", F.interpolate(x.detach(), size=(3, 8), mode="bilinear", align_corners=True))
emit("i5_y", F.interpolate(x.detach(), size=(2, 3), mode="bilinear", align_corners=False))
x.grad = None
y = F.interpolate(x, size=(7, 3), mode="nearest")
gy = rnd(*y.shape)
y.backward(gy)
emit("i6_gy", gy); emit("i6_gx", x.grad)

# ---- norms ------------------------------------------------------------------------
x = rnd(3, 4, 5)
w = rnd(4, 5)
b = rnd(4, 5)
emit("ln_x", x); emit("ln_w", w); emit("ln_b", b)
emit("ln1_y", F.layer_norm(x, (4, 5), w, b, 1e-5))
emit("ln2_y", F.layer_norm(x, (5,), None, None, 1e-3))
emit("ln_mean", x.mean(dim=(1, 2)))
xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
y = F.layer_norm(xg, (4, 5), wg, bg, 1e-5)
gy = rnd(*y.shape)
y.backward(gy)
emit("ln1_gy", gy); emit("ln1_gx", xg.grad); emit("ln1_gw", wg.grad); emit("ln1_gb", bg.grad)
emit("ln_rstd", 1 / torch.sqrt(x.var(dim=(1, 2), unbiased=False) + 1e-5))

x = rnd(2, 6, 3, 3)
w = rnd(6)
b = rnd(6)
emit("gn_x", x); emit("gn_w", w); emit("gn_b", b)
emit("gn1_y", F.group_norm(x, 3, w, b, 1e-5))
xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
y = F.group_norm(xg, 3, wg, bg, 1e-5)
gy = rnd(*y.shape)
y.backward(gy)
emit("gn1_gy", gy); emit("gn1_gx", xg.grad); emit("gn1_gw", wg.grad); emit("gn1_gb", bg.grad)
xr = x.reshape(2, 3, -1)
emit("gn1_mean", xr.mean(-1))
emit("gn1_rstd", 1 / torch.sqrt(xr.var(-1, unbiased=False) + 1e-5))
x2 = rnd(2, 4)
emit("gn2_x", x2); emit("gn2_y", F.group_norm(x2, 2, None, None, 1e-5))

x = rnd(4, 3, 2, 2)
rm = rnd(3)
rv = rnd(3).abs() + 0.5
w = rnd(3)
b = rnd(3)
emit("bn_x", x); emit("bn_rm", rm); emit("bn_rv", rv); emit("bn_w", w); emit("bn_b", b)
emit("bn_eval_y", F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-5))
rm2, rv2 = rm.clone(), rv.clone()
emit("bn_train_y", F.batch_norm(x, rm2, rv2, w, b, training=True, momentum=0.1, eps=1e-5))
emit("bn_train_rm", rm2); emit("bn_train_rv", rv2)
for mode in ("train", "eval"):
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    y = F.batch_norm(xg, rm.clone(), rv.clone(), wg, bg, training=mode == "train", eps=1e-5)
    gy = rnd(*y.shape)
    y.backward(gy)
    emit("bn_%s_gy" % mode, gy); emit("bn_%s_gx" % mode, xg.grad)
    emit("bn_%s_gw" % mode, wg.grad); emit("bn_%s_gb" % mode, bg.grad)
emit("bn_train_nowb_y", F.batch_norm(x, None, None, None, None, training=True, eps=1e-5))
x3 = rnd(5, 3)
emit("bn3_x", x3); emit("bn3_y", F.batch_norm(x3, None, None, None, None, training=True, eps=1e-5))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_norm_ref.h")
with open(path, "w") as f:
    f.write("/* Generated by tests/ref/gen_conv_norm.py (PyTorch %s, float64); do not edit. */\n"
            % torch.__version__.split("+")[0])
    f.write("#ifndef CONV_NORM_REF_H\n#define CONV_NORM_REF_H\n")
    f.write("\n".join(out))
    f.write("\n#endif\n")
