"""Peer of bench/bench_int8.c: ONNX Runtime on the same architectures (the
demo CNN, the MLP, the encoder feed-forward block), f32
and int8 from its own quantize_static (QDQ format, uint8 activations per
tensor, int8 weights per channel, min-max calibration on four batches of
16 random samples, as the bench calibrates). Weights are random (the
latency does not depend on them). Median latency at batch 1 and 64 on two
intra-op threads (oar runs on the process's two OpenMP threads). Needs
onnx and onnxruntime (python3 -m venv /tmp/ortvenv && /tmp/ortvenv/bin/pip
install onnxruntime onnx numpy); run: /tmp/ortvenv/bin/python bench/peer/int8.py
Prints "ort <metric> <value> <unit>" with bench_int8's metric names."""
import os
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

rng = np.random.default_rng(42)


def model(dims, rows_per_sample):
    nodes, init = [], []
    cur = "x"
    for l in range(len(dims) - 1):
        k, n = dims[l], dims[l + 1]
        a = np.sqrt(3.0 / k)
        init += [numpy_helper.from_array(rng.uniform(-a, a, (k, n)).astype(np.float32), "w%d" % l),
                 numpy_helper.from_array(np.full(n, 0.01, np.float32), "b%d" % l)]
        nodes += [helper.make_node("MatMul", [cur, "w%d" % l], ["m%d" % l]),
                  helper.make_node("Add", ["m%d" % l, "b%d" % l], ["a%d" % l])]
        cur = "a%d" % l
        if l < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [cur], ["r%d" % l]))
            cur = "r%d" % l
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "m", [vi("x", TensorProto.FLOAT, ["n", dims[0]])],
                          [vi("y", TensorProto.FLOAT, ["n", dims[-1]])], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def cnn():
    """examples/fashion_mnist.c's CNN, 16 channels, batchnorm folded into the convs' bias."""
    init, nodes = [], []
    cur = "x"
    for l, (ci, co) in enumerate([(1, 16), (16, 32)]):
        a = np.sqrt(3.0 / (ci * 9))
        init += [numpy_helper.from_array(rng.uniform(-a, a, (co, ci, 3, 3)).astype(np.float32), "cw%d" % l),
                 numpy_helper.from_array(np.full(co, 0.01, np.float32), "cb%d" % l)]
        nodes += [helper.make_node("Conv", [cur, "cw%d" % l, "cb%d" % l], ["c%d" % l], pads=[1, 1, 1, 1],
                                   kernel_shape=[3, 3]),
                  helper.make_node("Relu", ["c%d" % l], ["cr%d" % l]),
                  helper.make_node("MaxPool", ["cr%d" % l], ["p%d" % l], kernel_shape=[2, 2], strides=[2, 2])]
        cur = "p%d" % l
    init.append(numpy_helper.from_array(np.array([-1, 32 * 49], np.int64), "flat"))
    nodes.append(helper.make_node("Reshape", [cur, "flat"], ["f"]))
    for l, (k, n) in enumerate([(32 * 49, 128), (128, 10)]):
        a = np.sqrt(3.0 / k)
        init += [numpy_helper.from_array(rng.uniform(-a, a, (k, n)).astype(np.float32), "w%d" % l),
                 numpy_helper.from_array(np.full(n, 0.01, np.float32), "b%d" % l)]
        src = "f" if l == 0 else "r0"
        nodes += [helper.make_node("MatMul", [src, "w%d" % l], ["m%d" % l]),
                  helper.make_node("Add", ["m%d" % l, "b%d" % l], ["a%d" % l if l == 0 else "y"])]
        if l == 0:
            nodes.append(helper.make_node("Relu", ["a0"], ["r0"]))
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "cnn", [vi("x", TensorProto.FLOAT, ["n", 1, 28, 28])],
                          [vi("y", TensorProto.FLOAT, ["n", 10])], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


class Reader(CalibrationDataReader):
    def __init__(self, rows, width, shape=None):
        self.batches = iter([{"x": rng.uniform(-1, 1, (rows, width)).astype(np.float32).reshape(shape or (rows, width))}
                             for _ in range(4)])

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


def run(name, dims, rows_per_sample, tmp):
    f32 = os.path.join(tmp, name + ".onnx")
    i8 = os.path.join(tmp, name + "_int8.onnx")
    image = name == "cnn"
    onnx.save(cnn() if image else model(dims, rows_per_sample), f32)
    reader = Reader(16, 784, (16, 1, 28, 28)) if image else Reader(16 * rows_per_sample, dims[0])
    quantize_static(f32, i8, reader, quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                    calibrate_method=CalibrationMethod.MinMax)
    sf, sq = session(f32), session(i8)
    for b in (1, 64):
        x = rng.uniform(-1, 1, (b * rows_per_sample, dims[0])).astype(np.float32)
        if image:
            x = x.reshape(b, 1, 28, 28)
        reps = 300 if b == 1 else 30
        f, q = median_ms(sf, x, reps), median_ms(sq, x, reps)
        print("ort %s_f32_b%d %.4f ms" % (name, b, f))
        print("ort %s_int8_b%d %.4f ms" % (name, b, q))
        print("ort %s_int8_over_f32_b%d %.3f x" % (name, b, q / f))


with tempfile.TemporaryDirectory() as tmp:
    run("cnn", [784], 1, tmp)
    run("mlp", [784, 512, 512, 10], 1, tmp)
    run("ffn", [256, 1024, 256], 32, tmp)
