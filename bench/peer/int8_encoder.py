"""Peer of bench/bench_int8_encoder.c: ONNX Runtime on the same encoder
(four post-norm Transformer encoder layers, d_model 256, 4 heads,
feed-forward 1024, ReLU, 32 tokens), written as ONNX by hand the way
torch.nn.TransformerEncoderLayer computes it (one q/k/v projection, the
heads' two batched products, softmax, LayerNormalization after each
residual add), f32 and int8 from ONNX Runtime's own quantize_static (QDQ,
uint8 activations per tensor, int8 weights per channel, min-max on four
batches of 16 random samples, as the bench calibrates; ONNX Runtime also
quantizes attention's products, its choice). Random weights: the latency
does not depend on them. Median latency at batch 1 and 64 on two intra-op
threads. Needs onnx and onnxruntime (python3 -m venv /tmp/ortvenv &&
/tmp/ortvenv/bin/pip install onnxruntime onnx numpy); run:
/tmp/ortvenv/bin/python bench/peer/int8_encoder.py
Prints "ort <metric> <value> <unit>" with bench_int8_encoder's metric names."""
import os
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

LAYERS, D, HEADS, FF, TOKENS = 4, 256, 4, 1024, 32
rng = np.random.default_rng(42)


def encoder():
    init, nodes = [], []

    def const(name, value):
        init.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name, k, n):
        a = np.sqrt(3.0 / k)
        return const(name, rng.uniform(-a, a, (k, n)).astype(np.float32))

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def linear(x, name, k, n):
        m = node("MatMul", [x, weight(name + ".w", k, n)], name + ".mm")
        return node("Add", [m, const(name + ".b", np.full(n, 0.01, np.float32))], name + ".out")

    def norm(x, name):
        return node("LayerNormalization", [x, const(name + ".g", np.ones(D, np.float32)),
                                           const(name + ".b", np.zeros(D, np.float32))], name + ".out",
                    axis=-1, epsilon=1e-5)

    heads = const("heads_shape", np.array([0, 0, HEADS, D // HEADS], np.int64))
    merged = const("merged_shape", np.array([0, 0, D], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(D // HEADS), np.float32))
    split = const("split", np.array([D, D, D], np.int64))
    x = "x"
    for l in range(LAYERS):
        p = "l%d" % l
        qkv = linear(x, p + ".in_proj", D, 3 * D)
        nodes.append(helper.make_node("Split", [qkv, split], [p + ".q", p + ".k", p + ".v"], axis=-1))
        q, k, v = (node("Transpose", [node("Reshape", [p + "." + t, heads], p + "." + t + "4")],
                        p + "." + t + "h", perm=[0, 2, 1, 3]) for t in "qkv")
        kt = node("Transpose", [k], p + ".kt", perm=[0, 1, 3, 2])
        s = node("Mul", [node("MatMul", [q, kt], p + ".qk"), scale], p + ".scores")
        a = node("Softmax", [s], p + ".attn", axis=-1)
        ctx = node("MatMul", [a, v], p + ".ctx")
        ctx = node("Reshape", [node("Transpose", [ctx], p + ".ctxt", perm=[0, 2, 1, 3]), merged], p + ".ctxm")
        att = linear(ctx, p + ".out_proj", D, D)
        x = norm(node("Add", [x, att], p + ".res1"), p + ".norm1")
        h = node("Relu", [linear(x, p + ".linear1", D, FF)], p + ".relu")
        x = norm(node("Add", [x, linear(h, p + ".linear2", FF, D)], p + ".res2"), p + ".norm2")
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "encoder", [vi("x", TensorProto.FLOAT, ["n", TOKENS, D])],
                          [vi("y", TensorProto.FLOAT, ["n", TOKENS, D])], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


class Reader(CalibrationDataReader):
    def __init__(self):
        self.batches = iter([{"x": rng.uniform(-1, 1, (16, TOKENS, D)).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


def session(path):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 2
    o.inter_op_num_threads = 1
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def median_ms(s, x, reps):
    for _ in range(3):
        s.run(None, {"x": x})
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        s.run(None, {"x": x})
        t.append(1e3 * (time.perf_counter() - t0))
    return float(np.median(t))


with tempfile.TemporaryDirectory() as tmp:
    f32, i8 = os.path.join(tmp, "encoder.onnx"), os.path.join(tmp, "encoder_int8.onnx")
    onnx.save(encoder(), f32)
    quantize_static(f32, i8, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True, calibrate_method=CalibrationMethod.MinMax)
    sf, sq = session(f32), session(i8)
    for b in (1, 64):
        x = rng.uniform(-1, 1, (b, TOKENS, D)).astype(np.float32)
        reps = 300 if b == 1 else 30
        f, q = median_ms(sf, x, reps), median_ms(sq, x, reps)
        print("ort encoder_f32_b%d %.4f ms" % (b, f))
        print("ort encoder_int8_b%d %.4f ms" % (b, q))
        print("ort encoder_int8_over_f32_b%d %.3f x" % (b, q / f))
