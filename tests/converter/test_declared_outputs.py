"""Graph outputs declared with a shape the graph contradicts (paddle2onnx declares PP-OCRv5's
4-D probability map a scalar): the converted model declares what the graph makes, as ONNX Runtime
returns it, and the conversion says so; a declaration the graph agrees with stays as written."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import converter
import lite


def _scaled_sigmoid(declared: list[int | str] | None) -> onnx.ModelProto:
    """x [N, 3, H, W] -> per-channel Mul -> Sigmoid -> y, declared with shape ``declared``."""
    scale = np.array([0.5, 1.0, 2.0], np.float32).reshape(1, 3, 1, 1)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["scaled"]), helper.make_node("Sigmoid", ["scaled"], ["y"])], "declared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)], [numpy_helper.from_array(scale, "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _convert(model: onnx.ModelProto, tmp_path):
    report = converter.convert(model, tmp_path / "m.lite", verify=False)
    return report, lite.Model.load(tmp_path / "m.lite", device="numpy")


def test_a_scalar_declared_for_a_4d_output_gives_way_to_the_inferred_shape(tmp_path):
    report, model = _convert(_scaled_sigmoid([]), tmp_path)
    assert model.outputs[0].shape == ("N", 3, "H", "W")
    assert model.predict({"x": np.zeros((2, 3, 5, 6), np.float32)})["y"].shape == (2, 3, 5, 6)
    assert any("output 'y' is declared with shape [] but its node (Sigmoid) makes shape [N, 3, H, W]" in warning
               for warning in report.warnings), report.warnings
    assert "warning: output 'y' is declared with shape []" in report.table()


def test_a_declaration_the_graph_agrees_with_keeps_its_names(tmp_path):
    report, model = _convert(_scaled_sigmoid(["batch", 3, "height", None]), tmp_path)
    assert model.outputs[0].shape == ("batch", 3, "height", "W")
    assert not any("declared with shape" in warning for warning in report.warnings)


def test_an_output_inference_cannot_reach_keeps_its_declaration(tmp_path):
    """A Reshape to a computed shape: ONNX's inference gives it no shape, so nothing contradicts
    the declaration."""
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])], "unreached",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report, converted = _convert(model, tmp_path)
    assert converted.outputs[0].shape == ("N", 3)
    assert not any("declared with shape" in warning for warning in report.warnings)


def test_a_reshape_to_a_computed_shape_keeps_its_rank_so_a_wrong_declaration_is_found(tmp_path):
    """paddle2onnx's form: Reshape to Concat(batch from Shape, a computed size, 4); ONNX's
    inference gives the Reshape no shape at all, so the outputs after it had none either and
    the scalar declared for the recognizer's 3-D output stood. The target's length gives the rank."""
    four = numpy_helper.from_array(np.array([4], np.int64), "four")
    start, end = numpy_helper.from_array(np.array([0], np.int64), "start"), numpy_helper.from_array(np.array([1], np.int64), "end")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "start", "end"], ["n"]),
             helper.make_node("Neg", ["four"], ["minus_four"]), helper.make_node("Abs", ["minus_four"], ["length"]),
             helper.make_node("Concat", ["n", "length", "four"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=2)]
    graph = helper.make_graph(nodes, "paddle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [four, start, end])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    report, converted = _convert(model, tmp_path)
    assert len(converted.outputs[0].shape) == 3
    assert any("output 'y' is declared with shape [] but its node (Softmax) makes shape" in warning
               for warning in report.warnings), report.warnings
    assert converted.predict({"x": np.zeros((2, 16), np.float32)})["y"].shape == (2, 4, 4)

