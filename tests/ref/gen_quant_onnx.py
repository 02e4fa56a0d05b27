#!/tmp/ortvenv/bin/python
"""Writes tests/onnx/quant_sym.onnx and tests/onnx/quant_sym_ref.h for
tests/onnx/test_quant_onnx.c: QLinearMatMul, MatMulInteger, QLinearConv
(stride 2, pads 1, int32 bias, per-channel weight scales) and ConvInteger
(pads unequal at the ends: oar's f64 path) with int8 weights whose zero
points are 0 (symmetric, as ONNX Runtime's
quantize_static writes them), which oar imports onto its int8 kernels
(oar_qmatmul). Values: NumPy's evaluation of the graph, checked here
against ONNX Runtime's. Needs onnx and onnxruntime (a venv:
python3 -m venv /tmp/ortvenv && /tmp/ortvenv/bin/pip install onnxruntime
onnx numpy); run from tests/: /tmp/ortvenv/bin/python ref/gen_quant_onnx.py."""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
M, K, N = 3, 37, 5
x = rng.integers(0, 256, (2, M, K)).astype(np.uint8)              # batched uint8 activations
x_scale, x_zp = np.float32(0.02), np.uint8(131)
w = rng.integers(-128, 128, (K, N)).astype(np.int8)
w_scale = np.float32(0.003)
w_zp = np.int8(0)
y_scale, y_zp = np.float32(0.35), np.uint8(120)
wz = np.zeros(N, dtype=np.int8)                                    # per-column zero points, all 0

acc = (x.astype(np.int64) - np.int64(x_zp)) @ w.astype(np.int64)
yq = np.clip(np.rint(acc * (np.float64(x_scale) * np.float64(w_scale) / np.float64(y_scale))) + np.int64(y_zp),
             0, 255).astype(np.uint8)
mi = acc.astype(np.int32)

# QLinearConv and ConvInteger on an image: uint8 x, int8 w per output channel (zero points 0)
cx = rng.integers(0, 256, (2, 3, 7, 6)).astype(np.uint8)
cw = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
cw_scale = np.array([0.01, 0.02, 0.005, 0.03], dtype=np.float32)
cw_zp = np.zeros(4, dtype=np.int8)
cb = rng.integers(-2000, 2000, 4).astype(np.int32)
c_scale, c_zp = np.float32(0.8), np.uint8(100)


def conv_int(x, w, zx, stride, pad):
    xs = np.pad(x.astype(np.int64) - np.int64(zx), ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    n, c, h, wd = xs.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    y = np.zeros((n, o, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            patch = xs[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            y[:, :, i, j] = np.tensordot(patch, w.astype(np.int64), axes=([1, 2, 3], [1, 2, 3]))
    return y


cacc = conv_int(cx, cw, x_zp, 2, (1, 1, 1, 1)) + cb.reshape(1, 4, 1, 1)
cq = np.clip(np.rint(cacc * ((np.float64(x_scale) * cw_scale.astype(np.float64).reshape(1, 4, 1, 1))
                             / np.float64(c_scale))) + np.int64(c_zp), 0, 255).astype(np.uint8)
ci = conv_int(cx, cw, x_zp, 1, (0, 1, 1, 0)).astype(np.int32)  # pads unequal at the ends: the f64 path

init = [numpy_helper.from_array(a, n) for a, n in [
    (np.array(x_scale), "x_scale"), (np.array(x_zp), "x_zero_point"), (w, "w"), (np.array(w_scale), "w_scale"),
    (np.array(w_zp), "w_zero_point"), (np.array(y_scale), "y_scale"), (np.array(y_zp), "y_zero_point"),
    (wz, "w_zero_points"), (cw, "cw"), (cw_scale, "cw_scale"), (cw_zp, "cw_zero_point"), (cb, "cb"),
    (np.array(c_scale), "c_scale"), (np.array(c_zp), "c_zero_point")]]
nodes = [
    helper.make_node("QLinearMatMul", ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                       "y_scale", "y_zero_point"], ["yq"], name="qmm"),
    helper.make_node("MatMulInteger", ["x", "w", "x_zero_point", "w_zero_points"], ["mi"], name="mmi"),
    helper.make_node("QLinearConv", ["cx", "x_scale", "x_zero_point", "cw", "cw_scale", "cw_zero_point",
                                     "c_scale", "c_zero_point", "cb"], ["cq"], name="qconv", strides=[2, 2],
                     pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
    helper.make_node("ConvInteger", ["cx", "cw", "x_zero_point"], ["ci"], name="convi", pads=[0, 1, 1, 0]),
]
vi = helper.make_tensor_value_info
g = helper.make_graph(nodes, "quant_sym", [vi("x", TensorProto.UINT8, [2, M, K]),
                                           vi("cx", TensorProto.UINT8, list(cx.shape))],
                      [vi("yq", TensorProto.UINT8, [2, M, N]), vi("mi", TensorProto.INT32, [2, M, N]),
                       vi("cq", TensorProto.UINT8, list(cq.shape)), vi("ci", TensorProto.INT32, list(ci.shape))],
                      initializer=init)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
onnx.checker.check_model(m, full_check=True)
onnx.save(m, "onnx/quant_sym.onnx")

got = ort.InferenceSession("onnx/quant_sym.onnx", providers=["CPUExecutionProvider"]).run(None, {"x": x, "cx": cx})
assert np.array_equal(got[1], mi), "ONNX Runtime's MatMulInteger differs"
assert np.max(np.abs(got[0].astype(int) - yq.astype(int))) <= 1, "ONNX Runtime's QLinearMatMul differs"
assert np.max(np.abs(got[2].astype(int) - cq.astype(int))) <= 1, "ONNX Runtime's QLinearConv differs"
assert np.array_equal(got[3], ci), "ONNX Runtime's ConvInteger differs"


def carr(name, a):
    a = np.asarray(a, dtype=np.float64).ravel()
    return "static const double %s[%d] = {%s};\n" % (name, len(a), ", ".join("%.17g" % v for v in a))


with open("onnx/quant_sym_ref.h", "w") as f:
    f.write("/* Generated by tests/ref/gen_quant_onnx.py (NumPy's evaluation of onnx/quant_sym.onnx); "
            "do not edit. */\n")
    f.write(carr("qs_x", x) + carr("qs_yq", yq) + carr("qs_mi", mi) + carr("qs_cx", cx) + carr("qs_cq", cq) +
            carr("qs_ci", ci))
    f.write("/* cq %s, ci %s */\n" % (list(cq.shape), list(ci.shape)))
print("wrote onnx/quant_sym.onnx, onnx/quant_sym_ref.h")
