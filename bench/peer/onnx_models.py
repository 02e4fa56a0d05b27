# Peer of bench/onnx_models.sh (issue 10): imported ONNX models served by
# ONNX Runtime and by PyTorch, 2 threads each.
#   export DIR (PyTorch): writes resnet18.onnx (random weights, dynamic batch)
#       and encoder_b1.onnx / encoder_b32.onnx (nn.TransformerEncoderLayer,
#       d 256, 4 heads, feed-forward 1024, T 64, static batch 1 and 32), and
#       prints PyTorch's own latency (batch 1) and throughput (batch 32).
#   export-onnx DIR (the onnx package, no PyTorch): writes resnet18.onnx only,
#       the same layers as the PyTorch export (batch norm folded into the
#       convs' biases, as PyTorch's eval-mode export does), random weights.
#   run DIR NAME BATCH (ONNX Runtime): prints its latency or throughput.
# Lines: "<who> <model>_b<batch> <value> ms|samples/s".
import os
import sys
import time

import numpy as np

ITERS = {1: 30, 32: 5}


def best_of(fn, iters):
    fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.mean(times))


def report(who, name, batch, mean_s):
    if batch == 1:
        print("%s %s_b1 %.3f ms" % (who, name, mean_s * 1e3))
    else:
        print("%s %s_b%d %.1f samples/s" % (who, name, batch, batch / mean_s))


def export(out):
    import torch
    torch.set_num_threads(2)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "ref"))
    from gen_onnx_torch import ResNet18
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    models = {"resnet18": (ResNet18().eval(), (3, 224, 224))}
    enc = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True).eval()
    models["encoder"] = (enc, (64, 256))
    with torch.no_grad():
        for name, (m, shape) in models.items():
            for batch in (1, 32):
                x = torch.randn(batch, *shape)
                if name == "resnet18":
                    path = os.path.join(out, "resnet18.onnx")
                    if batch == 1:
                        torch.onnx.export(m, x, path, opset_version=17, input_names=["x"], output_names=["y"],
                                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
                else:  # with gradients on, which keeps PyTorch's fused inference
                    # kernel (not exportable) out of the trace
                    with torch.enable_grad():
                        torch.onnx.export(m, x, os.path.join(out, "encoder_b%d.onnx" % batch), opset_version=17,
                                          input_names=["x"], output_names=["y"])
                report("torch", name, batch, best_of(lambda: m(x), ITERS[batch]))


def export_onnx(out):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def conv(x, cin, cout, k, s, p, relu):
        i = len(nodes)
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)])
        nodes.append(helper.make_node("Conv", [x, "w%d" % i, "b%d" % i], ["c%d" % i], kernel_shape=[k, k],
                                      strides=[s, s], pads=[p, p, p, p]))
        if relu:
            nodes.append(helper.make_node("Relu", ["c%d" % i], ["r%d" % i]))
            return "r%d" % i
        return "c%d" % i

    x = conv("x", 3, 64, 7, 2, 3, True)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool", 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            h = conv(conv(x, cin, cout, 3, s, 1, True), cout, cout, 3, 1, 1, False)
            short = conv(x, cin, cout, 1, s, 0, False) if s != 1 or cin != cout else x
            i = len(nodes)
            nodes.append(helper.make_node("Add", [h, short], ["a%d" % i]))
            nodes.append(helper.make_node("Relu", ["a%d" % i], ["y%d" % i]))
            x, cin = "y%d" % i, cout
    inits.extend([numpy_helper.from_array((rng.standard_normal((1000, 512)) * 0.03).astype(np.float32), "fc.w"),
                  numpy_helper.from_array(np.zeros(1000, np.float32), "fc.b")])
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "resnet18", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 224, 224])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(out, exist_ok=True)
    onnx.save(model, os.path.join(out, "resnet18.onnx"))


def run(out, name, batch):
    import onnxruntime as ort
    opt = ort.SessionOptions()
    opt.intra_op_num_threads = 2
    opt.inter_op_num_threads = 1
    file = "resnet18.onnx" if name == "resnet18" else "encoder_b%d.onnx" % batch
    s = ort.InferenceSession(os.path.join(out, file), opt, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    shape = [batch if not isinstance(d, int) else d for d in inp.shape]
    shape[0] = batch
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    report("onnxruntime", name, batch, best_of(lambda: s.run(None, {inp.name: x}), ITERS[batch]))


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(sys.argv[2])
    elif sys.argv[1] == "export-onnx":
        export_onnx(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]))
