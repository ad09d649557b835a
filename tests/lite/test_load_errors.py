"""What Model.load says when it is given something other than a .lite file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import lite


def test_a_missing_file_is_a_typed_error_naming_the_path(tmp_path):
    missing = tmp_path / "nope.lite"
    with pytest.raises(lite.ModelNotFoundError, match="model file not found: .*nope.lite") as caught:
        lite.Model.load(missing, device="numpy")
    assert isinstance(caught.value, lite.LiteError) and isinstance(caught.value, FileNotFoundError)


def test_an_onnx_model_is_refused_with_the_command_that_converts_it(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), path)
    with pytest.raises(lite.ModelFormatError, match="lite convert MODEL.onnx -o MODEL.lite"):
        lite.Model.load(path, device="numpy")
    with pytest.raises(lite.ModelFormatError) as caught:
        lite.Model.load(np.zeros(64, np.uint8).tobytes(), device="numpy")
    assert "lite convert" not in str(caught.value)
