"""Writes tests/onnx/mlp13_ext.onnx: tests/onnx/mlp13.onnx with every
initializer moved to the external file mlp13_ext.data (ONNX's external data:
"location" relative to the model's folder, "offset", "length"), so the
importer's external-data path is checked against the same model inline.
Run from the repository root: python3 tests/ref/gen_onnx_external.py"""
import os

import onnx
from onnx.external_data_helper import convert_model_to_external_data

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "onnx")
model = onnx.load(os.path.join(here, "mlp13.onnx"))
convert_model_to_external_data(model, all_tensors_to_one_file=True, location="mlp13_ext.data",
                               size_threshold=0)
onnx.save_model(model, os.path.join(here, "mlp13_ext.onnx"))
onnx.checker.check_model(os.path.join(here, "mlp13_ext.onnx"))
print("wrote mlp13_ext.onnx and mlp13_ext.data")
