"""store_weights_fp16 on models that are already integer: the float inputs of their integer layers
stay float32, the other float weights become float16."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from converter.passes import run_passes, store_weights_fp16
from converter.passes.base import PassContext

rng = np.random.default_rng(3)
HIDDEN = 4


def _model(nodes, inputs, outputs, initializers) -> ir.Model:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(value, name) for name, value in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return ir.serde.deserialize_model(model)


def _stored_types(model: ir.Model) -> dict[str, ir.DataType]:
    """Each original initializer's type as stored: float16 where the pass added ``<name>_fp16``."""
    stored = {name: value.dtype for name, value in model.graph.initializers.items()}
    return {name.removesuffix("_fp16"): dtype for name, dtype in stored.items()}


def _quantized_lstm_then_scale() -> ir.Model:
    """ONNX Runtime's dynamic quantizer's LSTM, its output scaled by a float weight."""
    lstm = helper.make_node(
        "DynamicQuantizeLSTM",
        ["x", "w", "r", "b", "", "", "", "", "w_scale", "w_zero", "r_scale", "r_zero"], ["y"],
        domain="com.microsoft", hidden_size=HIDDEN,
    )
    scale = helper.make_node("Mul", ["y", "gain"], ["out"])
    initializers = {
        "w": rng.integers(-127, 128, (1, 3, 4 * HIDDEN)).astype(np.int8),
        "r": rng.integers(-127, 128, (1, HIDDEN, 4 * HIDDEN)).astype(np.int8),
        "b": rng.normal(size=(1, 8 * HIDDEN)).astype(np.float32),
        "w_scale": np.array([0.0123], np.float32),
        "w_zero": np.zeros(1, np.int8),
        "r_scale": rng.uniform(0.01, 0.02, (1, 4 * HIDDEN)).astype(np.float32),
        "r_zero": np.zeros((1, 4 * HIDDEN), np.int8),
        "gain": rng.normal(size=(5, 1, 1, HIDDEN)).astype(np.float32),  # > 16 elements: halved
    }
    return _model([lstm, scale], [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [5, 1, 3])],
                  [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)], initializers)


def test_onnxruntime_integer_layers_keep_every_float_input():
    """The quantized LSTM's bias and scales stay float32 (ONNX Runtime's float16 converter, which
    must leave the node in float32, keeps them too); the Mul's weight after it is halved."""
    model = _quantized_lstm_then_scale()
    [result] = run_passes(model, (store_weights_fp16,), PassContext())
    types = _stored_types(model)
    assert {name: types[name] for name in ("b", "w_scale", "r_scale")} == dict.fromkeys(
        ("b", "w_scale", "r_scale"), ir.DataType.FLOAT)
    assert types["gain"] == ir.DataType.FLOAT16 and types["w"] == ir.DataType.INT8
    assert result.counts["quantization parameters kept"] == 3 and result.counts["weights"] == 1
    assert any("3 float inputs of integer layers kept in float32" in line for line in result.details)


def test_qlinear_matmul_keeps_its_scales_and_nothing_else_is_taken_for_one():
    """QLinearMatMul's three scales stay float32; a float weight named like a scale but read by a
    Mul is an ordinary weight."""
    matmul = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero",
                                                "y_scale", "y_zero"], ["q"])
    dequantize = helper.make_node("DequantizeLinear", ["q", "y_scale", "y_zero"], ["d"])
    mul = helper.make_node("Mul", ["d", "mul_scale"], ["out"])
    initializers = {
        "a_scale": np.array(0.02, np.float32), "a_zero": np.array(128, np.uint8),
        "b": rng.integers(-127, 128, (6, 8)).astype(np.int8),
        "b_scale": np.array(0.0097, np.float32), "b_zero": np.array(0, np.int8),
        "y_scale": np.array(0.051, np.float32), "y_zero": np.array(120, np.uint8),
        "mul_scale": rng.uniform(0.3, 0.7, (3, 8)).astype(np.float32),  # > 16 elements: halved
    }
    model = _model([matmul, dequantize, mul], [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, [3, 6])],
                   [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)], initializers)
    [result] = run_passes(model, (store_weights_fp16,), PassContext())
    types = _stored_types(model)
    assert [types[name] for name in ("a_scale", "b_scale", "y_scale")] == [ir.DataType.FLOAT] * 3
    assert types["mul_scale"] == ir.DataType.FLOAT16
    assert result.counts["quantization parameters kept"] == 3 and result.counts["weights"] == 1
