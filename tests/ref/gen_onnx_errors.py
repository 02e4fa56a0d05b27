"""Small hand-built ONNX models and TensorProto files for the importer's
error paths and options (tests/onnx/test_onnx.c): an op at an opset outside
its registry rows, inconsistent shapes, an element type oar lacks (int16), a
Reshape whose shape is a graph input, the opset-18 forms of ReduceMean, Pad and Split, an opset beyond 18, and two
serialized tensors. Run from tests/: /usr/bin/python3 ref/gen_onnx_errors.py"""
import onnx
from onnx import TensorProto, helper


def save(nodes, name, inputs, outputs, opset, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), "onnx/%s.onnx" % name)


vi = helper.make_tensor_value_info
# Scatter exists at opsets 9..10 only (ScatterElements from 11)
save([helper.make_node("Scatter", ["x", "i", "u"], ["y"], name="sc")], "bad_opset_op",
     [vi("x", TensorProto.FLOAT, [2, 2]), vi("i", TensorProto.INT64, [1, 2]), vi("u", TensorProto.FLOAT, [1, 2])],
     [vi("y", TensorProto.FLOAT, [2, 2])], 13)
# [2, 3] + [4, 5] do not broadcast
save([helper.make_node("Relu", ["a"], ["h"], name="r"), helper.make_node("Add", ["h", "b"], ["y"], name="add")],
     "bad_shapes", [vi("a", TensorProto.FLOAT, [2, 3]), vi("b", TensorProto.FLOAT, [4, 5])],
     [vi("y", TensorProto.FLOAT, [2, 3])], 13)
save([helper.make_node("Relu", ["x"], ["y"], name="r")], "bad_dtype", [vi("x", TensorProto.INT16, [2])],
     [vi("y", TensorProto.INT16, [2])], 13)
save([helper.make_node("Relu", ["x"], ["y"], name="r")], "opset19", [vi("x", TensorProto.FLOAT, [2])],
     [vi("y", TensorProto.FLOAT, [2])], 19)
# opset 18: ReduceMean's axes as an input, Pad's axes, Split's num_outputs
ax = helper.make_tensor("ax", TensorProto.INT64, [1], [1])
pads = helper.make_tensor("pads", TensorProto.INT64, [2], [1, 2])
save([helper.make_node("ReduceMean", ["x", "ax"], ["m"], keepdims=0, name="mean"),
      helper.make_node("Pad", ["x", "pads", "", "ax"], ["p"], name="pad"),
      helper.make_node("Split", ["x"], ["s0", "s1"], axis=1, num_outputs=2, name="split")], "opset18",
     [vi("x", TensorProto.FLOAT, [2, 3])],
     [vi("m", TensorProto.FLOAT, [2]), vi("p", TensorProto.FLOAT, [2, 6]), vi("s0", TensorProto.FLOAT, [2, 2]),
      vi("s1", TensorProto.FLOAT, [2, 1])], 18, [ax, pads])
# y = reshape(x, s) with s a graph input: needs s's value at import
save([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], "runtime_shape",
     [vi("x", TensorProto.FLOAT, [2, 3]), vi("s", TensorProto.INT64, [2])], [vi("y", TensorProto.FLOAT, [3, 2])], 13)
t = helper.make_tensor("t", TensorProto.INT64, [2, 2], [1, -2, 3, 1 << 40])
open("onnx/tensor_i64.pb", "wb").write(t.SerializeToString())
t = helper.make_tensor("t8", TensorProto.INT8, [2], [1, -2])
open("onnx/tensor_i8.pb", "wb").write(t.SerializeToString())
t = helper.make_tensor("t16", TensorProto.INT16, [2], [1, -2])
open("onnx/tensor_i16.pb", "wb").write(t.SerializeToString())
# x [N, 3] with N dynamic: Shape -> Gather -> Add 1 is arithmetic on the
# dynamic size (N + 1 as an output: computed at run time)
i0 = helper.make_tensor("i0", TensorProto.INT64, [], [0])
one = helper.make_tensor("one", TensorProto.INT64, [], [1])
save([helper.make_node("Shape", ["x"], ["s"], name="shape"), helper.make_node("Gather", ["s", "i0"], ["n"], name="g"),
      helper.make_node("Add", ["n", "one"], ["n1"], name="plus1")], "shape_arith",
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
     [helper.make_tensor_value_info("n1", TensorProto.INT64, [])], 13, [i0, one])
