"""Tensors kept in float stay float through the ops that only move their values."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import converter
from lite.engines.numpy_engine import NumpyEngine
from lite.format import load


def _padded_detections():
    """ultralytics' nms=True tail: [box (0..640) | score (0..1)] rows concatenated, padded with
    zero rows to a fixed count (Pad), then reshaped to [1, rows, 5]."""
    rng = np.random.default_rng(0)
    constants = [numpy_helper.from_array(rng.random((4, 3, 1, 1), dtype=np.float32), "wb"),
                 numpy_helper.from_array(rng.standard_normal((1, 3, 1, 1)).astype(np.float32), "ws"),
                 numpy_helper.from_array(np.array([10, 4], np.int64), "box_shape"),
                 numpy_helper.from_array(np.array([10, 1], np.int64), "score_shape"),
                 numpy_helper.from_array(np.array([1, 30, 5], np.int64), "out_shape"),
                 numpy_helper.from_array(np.array(640, np.float32), "k640"),
                 numpy_helper.from_array(np.array([0, 0, 20, 0], np.int64), "pads")]
    nodes = [
        helper.make_node("Conv", ["x", "wb"], ["cb"]), helper.make_node("Reshape", ["cb", "box_shape"], ["b4"]),
        helper.make_node("Mul", ["b4", "k640"], ["boxes"]),
        helper.make_node("Conv", ["x", "ws"], ["cs"]), helper.make_node("Reshape", ["cs", "score_shape"], ["s1"]),
        helper.make_node("Sigmoid", ["s1"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["rows"], axis=1, name="rows"),
        helper.make_node("Pad", ["rows", "pads"], ["padded"], name="pad"),
        helper.make_node("Reshape", ["padded", "out_shape"], ["out"], name="batch"),
    ]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 1])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 30, 5])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_scores_survive_a_pad_after_the_float_concat(tmp_path):
    """The Pad's output got one int8 scale for 0..640 and 0..1 (a step of 3.7): every score was 0."""
    rng = np.random.default_rng(1)
    samples = [rng.random((1, 3, 10, 1), dtype=np.float32) for _ in range(8)]
    report = converter.convert(_padded_detections(), tmp_path / "q.lite", quant="int8", calibration_data=samples)
    declined = {name: reason for name, _, reason in report.quantization.declined}
    assert "Concat 'rows'" in declined["batch"], declined
    x = rng.random((1, 3, 10, 1), dtype=np.float32)
    expected = ort.InferenceSession(_padded_detections().SerializeToString()).run(None, {"x": x})[0]
    got = NumpyEngine(load(tmp_path / "q.lite")).run({"x": x})["out"]
    assert expected[0, :10, 4].min() > 0.05  # the scores are there to lose
    np.testing.assert_allclose(got[0, :, 4], expected[0, :, 4], atol=0.02)
    assert not [w for w in report.quantization.warnings if "against the float model" in w]


def test_a_reshape_after_a_float_node_gets_no_pair(tmp_path):
    """Conv -> Sigmoid (float) -> Transpose -> output: a pair on the Transpose only adds error."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Transpose", ["s"], ["y"], perm=[0, 2, 3, 1], name="nhwc")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 4])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    samples = [rng.random((1, 3, 8, 8), dtype=np.float32) for _ in range(4)]
    report = converter.convert(proto, tmp_path / "q.lite", quant="int8", calibration_data=samples)
    declined = {name: reason for name, _, reason in report.quantization.declined}
    assert "kept in float" in declined["nhwc"] and "conv" in report.quantization.quantized_nodes
    model = load(tmp_path / "q.lite")
    quantized = {t.name for t in model.main.tensors if t.quant is not None}
    assert "x_quantized" in quantized and not [name for name in quantized if name[0] in "sy"], quantized
