"""Static int8 files that ONNX Runtime (device='cpu') loads: node names unique against the
source's own (ONNX Runtime's quantizer names its nodes '<tensor>_QuantizeLinear' too)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from lite.format import load

ort = pytest.importorskip("onnxruntime")


def _conv_relu_conv():
    """Conv → Relu → Conv whose first node bears the name lite gives the QuantizeLinear of its output."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="a_QuantizeLinear", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _samples(count: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.random((1, 3, 16, 16), dtype=np.float32) for _ in range(count)]


def test_qdq_nodes_avoid_the_names_of_the_sources_nodes(tmp_path):
    out = tmp_path / "q.lite"
    report = converter.convert(_conv_relu_conv(), out, quant="int8", calibration_data=_samples())
    assert not [w for w in report.quantization.warnings if "could not be checked" in w]
    names = Counter(node.name for node in load(out).main.nodes)
    assert names["a_QuantizeLinear"] == 1 and max(names.values()) == 1
    x = _samples(1)[0]
    expected = ort.InferenceSession(_conv_relu_conv().SerializeToString()).run(None, {"x": x})[0]
    got = lite.Model.load(out, device="cpu", cache_dir=None).predict({"x": x})["y"]
    assert np.corrcoef(got.reshape(-1), expected.reshape(-1))[0, 1] > 0.99
