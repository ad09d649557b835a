"""Graphs as skl2onnx writes them for scikit-learn models (ai.onnx.ml ops), converted with default
options. Built with onnx.helper, so the tests need neither skl2onnx nor scikit-learn."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import converter
from converter.errors import ModelImportError

pytest.importorskip("onnxruntime")

_OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]


def _zipmap_classifier() -> onnx.ModelProto:
    """A LogisticRegression with skl2onnx's default ZipMap: probabilities as a list of dicts."""
    linear = helper.make_node(
        "LinearClassifier", ["X"], ["label", "probability_tensor"], domain="ai.onnx.ml",
        classlabels_ints=[0, 1], coefficients=[0.5, -0.25, -0.5, 0.25], intercepts=[0.1, -0.1],
        multi_class=1, post_transform="LOGISTIC",
    )
    zipmap = helper.make_node("ZipMap", ["probability_tensor"], ["output_probability"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1], name="ZipMap")
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    graph = helper.make_graph(
        [linear, zipmap], "sklearn_like",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_value_info("output_probability", helper.make_sequence_type_proto(map_type))],
    )
    return helper.make_model(graph, opset_imports=_OPSETS)


def test_a_zipmap_output_is_refused_naming_the_node_and_the_tensor_to_use(tmp_path):
    with pytest.raises(ModelImportError) as caught:
        converter.convert(_zipmap_classifier(), tmp_path / "m.lite")
    message = str(caught.value)
    assert "'output_probability' is a sequence(map(int64, tensor(float)))" in message
    assert "ZipMap node 'ZipMap'" in message and "'probability_tensor'" in message
    assert "zipmap" in message and "malformed" not in message
