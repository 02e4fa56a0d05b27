#!/usr/bin/python3
"""ONNX If and Loop models whose condition and trip count are graph inputs
(computed at run time), for oar's importer (run from tests/:
/usr/bin/python3 ref/gen_onnx_control.py). The expected values are closed
forms the C test computes itself (tests/onnx/test_onnx_control.c).

  control_if.onnx    x [N, 3] float, c bool []:
                     y = c ? x * 2 + w : x - w   (w an initializer [3] read
                     by both branches from the outer scope)
  control_loop.onnx  x [3] float, M int64 [], limit float []:
                     v = x; for i < M while sum(v) < limit: v = v * 2 + i
                     (the body's condition computed from v; i is the
                     iteration number); outputs v and the trip count
                     (a second loop-carried value k = k + 1)
  control_loop_m10.onnx  as control_loop with M = 10 an initializer: the
                     trip count is known, the body's condition is not
                     (unrolling stops at it and a while node is made)
  control_if_shapes.onnx  as control_if, the else branch [N, 2]: refused
                     (a cond node's branches agree on shapes)
  control_if_sizes.onnx  x [N, 3], c bool: y = c ? Shape(x) : Shape(x) * 2
                     (sizes of a dynamic dim leaving a branch: computed
                     at run time)
  dropout_train.onnx x [N, 64] float: training-mode Dropout without a seed
                     (ratio 0.25), outputs y and the mask (oar draws a new
                     mask each run; the test checks y against the mask)
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

vi = helper.make_tensor_value_info


def save(graph, name, opset=13):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="gen_onnx_control")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, "onnx/%s.onnx" % name)


w = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], dtype=np.float32), "w")
two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t0"]), helper.make_node("Add", ["t0", "w"], ["ty"])],
                           "then", [], [vi("ty", TensorProto.FLOAT, ["N", 3])])
else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["ey"])], "else", [],
                           [vi("ey", TensorProto.FLOAT, ["N", 3])])
save(helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")],
                       "control_if", [vi("x", TensorProto.FLOAT, ["N", 3]), vi("c", TensorProto.BOOL, [])],
                       [vi("y", TensorProto.FLOAT, ["N", 3])], [w, two]), "control_if")

one = numpy_helper.from_array(np.array(1, dtype=np.int64), "one")
body = helper.make_graph(
    [helper.make_node("Mul", ["v_in", "two"], ["v2"]),
     helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
     helper.make_node("Add", ["v2", "fi"], ["v_out"]),
     helper.make_node("Add", ["k_in", "one"], ["k_out"]),
     helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
     helper.make_node("Less", ["s", "limit"], ["c_out"])],
    "body", [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []), vi("v_in", TensorProto.FLOAT, [3]),
             vi("k_in", TensorProto.INT64, [])],
    [vi("c_out", TensorProto.BOOL, []), vi("v_out", TensorProto.FLOAT, [3]), vi("k_out", TensorProto.INT64, [])])
zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")
true = numpy_helper.from_array(np.array(True), "true")
save(helper.make_graph([helper.make_node("Loop", ["M", "true", "x", "zero"], ["v", "k"], body=body, name="loop")],
                       "control_loop", [vi("x", TensorProto.FLOAT, [3]), vi("M", TensorProto.INT64, []),
                                        vi("limit", TensorProto.FLOAT, [])],
                       [vi("v", TensorProto.FLOAT, [3]), vi("k", TensorProto.INT64, [])], [two, one, zero, true]),
     "control_loop")

r = numpy_helper.from_array(np.array(0.25, dtype=np.float32), "r")
save(helper.make_graph([helper.make_node("Dropout", ["x", "r", "true"], ["y", "mask"], name="drop")],
                       "dropout_train", [vi("x", TensorProto.FLOAT, ["N", 64])],
                       [vi("y", TensorProto.FLOAT, ["N", 64]), vi("mask", TensorProto.BOOL, ["N", 64])], [r, true]),
     "dropout_train")

else2 = helper.make_graph([helper.make_node("Slice", ["x", "s0", "s2", "s1"], ["ey"])], "else", [],
                         [vi("ey", TensorProto.FLOAT, ["N", 2])])
s012 = [numpy_helper.from_array(np.array([v], dtype=np.int64), n) for v, n in ((0, "s0"), (1, "s1"), (2, "s2"))]
save(helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else2, name="if")],
                       "control_if_shapes", [vi("x", TensorProto.FLOAT, ["N", 3]), vi("c", TensorProto.BOOL, [])],
                       [vi("y", TensorProto.FLOAT, ["N", None])], [w, two] + s012), "control_if_shapes")

i2 = numpy_helper.from_array(np.array([2], dtype=np.int64), "i2")
then_s = helper.make_graph([helper.make_node("Shape", ["x"], ["ts"])], "then", [], [vi("ts", TensorProto.INT64, [2])])
else_s = helper.make_graph([helper.make_node("Shape", ["x"], ["es0"]), helper.make_node("Mul", ["es0", "i2"], ["es"])],
                           "else", [], [vi("es", TensorProto.INT64, [2])])
save(helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_s, else_branch=else_s, name="if")],
                       "control_if_sizes", [vi("x", TensorProto.FLOAT, ["N", 3]), vi("c", TensorProto.BOOL, [])],
                       [vi("y", TensorProto.INT64, [2])], [i2]), "control_if_sizes")

m10 = numpy_helper.from_array(np.array(10, dtype=np.int64), "M")
save(helper.make_graph([helper.make_node("Loop", ["M", "true", "x", "zero"], ["v", "k"], body=body, name="loop")],
                       "control_loop_m10", [vi("x", TensorProto.FLOAT, [3]), vi("limit", TensorProto.FLOAT, [])],
                       [vi("v", TensorProto.FLOAT, [3]), vi("k", TensorProto.INT64, [])], [two, one, zero, true, m10]),
     "control_loop_m10")
