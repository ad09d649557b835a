"""Shape inference as a check of the model: an input outside its op's type constraint makes the
model invalid (ONNX Runtime refuses it), and the conversion says so instead of writing a file the
numpy engine would compute wrongly."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.errors import ModelImportError


def test_an_input_outside_its_ops_type_constraint_is_refused_not_computed_on_raw_values(tmp_path):
    """tflite2onnx writes a dynamic-range int8 TFLite model as Conv with raw int8 weights and no
    DequantizeLinear: ONNX Runtime refuses the file; the numpy engine computed on the raw values."""
    weight = numpy_helper.from_array(np.full((2, 3, 1, 1), 100, np.int8), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "int8_weight",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with pytest.raises(ModelImportError, match=r"model is invalid: .*Conv.*unsupported type: tensor\(int8\)"):
        converter.convert(model, tmp_path / "m.lite")
    assert not (tmp_path / "m.lite").exists()
