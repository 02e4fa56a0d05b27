#!/usr/bin/python3
"""Writes the ONNX test models under tests/onnx/ and their reference values
to tests/onnx/onnx_ref.h (run from tests/: /usr/bin/python3 ref/gen_onnx.py).

mlp13 / cnn13 / misc13: PyTorch 1.13 models exported with torch.onnx.export
(opset 13, dynamic batch "N"); mlp11: the MLP at opset 11. softmax11 is
hand-built with onnx.helper: Softmax(axis=1) on a 3-D input at opset 11,
which flattens dims 1.. into one softmax (the pre-13 semantics), its
reference computed in NumPy. unknown_op: a node of op "FooBar"."""
import numpy as np
import onnx
from onnx import helper, TensorProto
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
out_h = []


def carr(name, a):
    a = np.asarray(a, dtype=np.float64).ravel()
    body = ",\n    ".join(", ".join("%.17g" % v for v in a[i:i + 6]) for i in range(0, len(a), 6))
    out_h.append("static const double %s[%d] = {\n    %s};\n" % (name, len(a), body))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return torch.softmax(self.l2(torch.sigmoid(self.l1(x))), dim=1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):  # [N, 1, 8, 8]
        x = nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)         # [N, 4, 4, 4]
        x = nn.functional.avg_pool2d(torch.tanh(self.c2(x)), 2, count_include_pad=False)         # [N, 8, 2, 2]
        return self.fc(torch.flatten(x, 1))


class Misc(nn.Module):
    def forward(self, x):  # [N, 3, 4, 4]
        g = nn.functional.adaptive_avg_pool2d(x, 1)           # GlobalAveragePool
        y = ((x - g) * 2.0 / 3.0).reshape(-1, 3, 16)            # Sub, Mul, Div, Reshape
        return y.transpose(1, 2)                                # Transpose


def export(model, name, x, opset):
    model.eval()
    path = "onnx/%s.onnx" % name
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    # a batch of 3 (traced at 2): the dynamic batch is exercised
    x3 = torch.randn(3, *x.shape[1:])
    with torch.no_grad():
        y3 = model(x3)
    carr("%s_x" % name, x3.numpy())
    carr("%s_y" % name, y3.numpy())
    out_h.append("static const int64_t %s_xshape[] = {%s};\n" % (name, ", ".join(map(str, x3.shape))))
    out_h.append("static const int64_t %s_yshape[] = {%s};\n" % (name, ", ".join(map(str, y3.shape))))
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    out_h.append("/* %s ops: %s */\n" % (name, " ".join(ops)))


mlp = MLP()
export(mlp, "mlp13", torch.randn(2, 8), 13)
export(mlp, "mlp11", torch.randn(2, 8), 11)
export(CNN(), "cnn13", torch.randn(2, 1, 8, 8), 13)
export(Misc(), "misc13", torch.randn(2, 3, 4, 4), 13)

# Softmax at opset 11 on [2, 3, 4], axis=1: one softmax over the 12 values
# of each row of the [2, 12] flattening.
x = np.random.randn(2, 3, 4).astype(np.float32)
f = x.reshape(2, 12).astype(np.float64)
e = np.exp(f - f.max(axis=1, keepdims=True))
carr("softmax11_x", x)
carr("softmax11_y", (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4))
g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=1, name="sm")], "softmax11",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), "onnx/softmax11.onnx")

g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="r"),
                       helper.make_node("FooBar", ["h"], ["y"], name="mystery")], "unknown",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "onnx/unknown_op.onnx")

# typed-field initializers (float_data, int64_data) instead of raw_data:
# y = Reshape(x + b, shape) with b = [1, 2, 3, 4, 5, 6] and shape = [3, 2]
b = helper.make_tensor("b", TensorProto.FLOAT, [6], [1, 2, 3, 4, 5, 6])
s = helper.make_tensor("s", TensorProto.INT64, [2], [3, 2])
g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["h"], name="add"),
                       helper.make_node("Reshape", ["h", "s"], ["y"], name="rs")], "typed",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], initializer=[b, s])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "onnx/typed.onnx")

with open("onnx/onnx_ref.h", "w") as fh:
    fh.write("/* Generated by tests/ref/gen_onnx.py (PyTorch %s, onnx %s). Do not edit. */\n"
             % (torch.__version__, onnx.__version__))
    fh.write("#include <stdint.h>\n")
    fh.writelines(out_h)
