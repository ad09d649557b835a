"""float16 graphs on the numpy engine, as onnxruntime's and onnxconverter-common's float16
converters write them (float16 inputs, outputs and weights): heavy kernels compute in float32
and round to float16 once, as ONNX Runtime does on CPUs, so each output is within one float16
step of the float32 result rounded to float16.
"""

from __future__ import annotations

import numpy as np
import pytest

import lite

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import converter  # noqa: E402

rng = np.random.default_rng(7)


def half(*shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float16)


def save(tmp_path, name, nodes, inputs, weights, elem_type):
    """The graph in ``elem_type`` (FLOAT16, or FLOAT for the reference), saved as ``name``.onnx."""
    dtype = np.float16 if elem_type == TensorProto.FLOAT16 else np.float32
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(key, elem_type, value.shape) for key, value in inputs.items()],
        [helper.make_tensor_value_info("y", elem_type, None)],
        [numpy_helper.from_array(value.astype(dtype) if value.dtype.kind == "f" else value, key)
         for key, value in weights.items()])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def float16_steps_off(tmp_path, nodes, inputs, weights):
    """How far (in float16 steps of the expected value) the numpy engine's float16 output is at most from
    the float32 graph's output, computed by ONNX Runtime from the same float16 values, rounded to
    float16."""
    half_path = save(tmp_path, "half", nodes, inputs, weights, TensorProto.FLOAT16)
    full_path = save(tmp_path, "full", nodes, inputs, weights, TensorProto.FLOAT)
    converter.convert(half_path, tmp_path / "half.lite", verify=False)
    got = lite.Model.load(tmp_path / "half.lite", device="numpy").predict(inputs)["y"]
    assert got.dtype == np.float16
    wide = {key: value.astype(np.float32) for key, value in inputs.items()}
    expected = ort.InferenceSession(str(full_path)).run(None, wide)[0].astype(np.float16)
    # Steps counted at 1e-3 at least: the two float32 computations (different summation orders)
    # differ by about 1e-7, more than a float16 step of the smallest outputs.
    step = np.spacing(np.maximum(np.abs(expected), np.float16(1e-3))).astype(np.float64)
    return np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)) / step)


@pytest.mark.parametrize("group", [1, 32], ids=["full", "depthwise"])
def test_conv_with_a_fused_hard_swish_rounds_once(tmp_path, group):
    # Rounded to float16 before the activation, and the activation computed in float16, the
    # output was 1.5 float16 steps off at its peak and hundreds near the gate's edges.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=group),
             helper.make_node("HardSwish", ["c"], ["y"])]
    weights = {"w": half(32, 32 // group, 3, 3, scale=0.1 if group == 1 else 0.3), "b": half(32)}
    assert float16_steps_off(tmp_path, nodes, {"x": half(1, 32, 28, 28)}, weights) <= 1.0


def test_gemm_with_a_fused_relu_rounds_once(tmp_path):
    nodes = [helper.make_node("Gemm", ["v", "w", "b"], ["c"], transB=1), helper.make_node("Relu", ["c"], ["y"])]
    weights = {"w": half(256, 576, scale=0.05), "b": half(256)}
    assert float16_steps_off(tmp_path, nodes, {"v": half(2, 576)}, weights) <= 1.0


def test_mat_mul_with_constant_weights_rounds_once(tmp_path):
    nodes = [helper.make_node("MatMul", ["v", "w"], ["y"])]
    weights = {"w": half(384, 128, scale=0.05)}
    assert float16_steps_off(tmp_path, nodes, {"v": half(3, 7, 384)}, weights) <= 1.0


@pytest.mark.parametrize("op, axes, shape", [
    ("ReduceMean", [1], (1, 512, 8, 8)),  # a mean over channels: summed one channel at a time
    ("ReduceSum", [0], (2048, 16)),
    ("ReduceMean", [2, 3], (1, 8, 64, 64)),
])
def test_reductions_accumulate_in_float32(tmp_path, op, axes, shape):
    # Accumulated in float16 along an outer axis, one value at a time, the channel mean was 9
    # float16 steps off and the column sum hundreds.
    nodes = [helper.make_node(op, ["x", "axes"], ["y"])]
    inputs = {"x": half(*shape, shift=3.0)}
    path = save(tmp_path, "half", nodes, inputs, {"axes": np.array(axes, np.int64)}, TensorProto.FLOAT16)
    converter.convert(path, tmp_path / "half.lite", verify=False)
    got = lite.Model.load(tmp_path / "half.lite", device="numpy").predict(inputs)["y"]
    x = inputs["x"].astype(np.float64)
    exact = x.mean(axis=tuple(axes), keepdims=True) if op == "ReduceMean" else x.sum(axis=tuple(axes), keepdims=True)
    step = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert got.dtype == np.float16
    assert np.max(np.abs(got.astype(np.float64) - exact) / step) <= 1.0


def test_global_average_pool_over_a_large_map(tmp_path):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["y"])]
    assert float16_steps_off(tmp_path, nodes, {"x": half(1, 16, 96, 96, shift=3.0)}, {}) <= 1.0


def run_numpy(tmp_path, nodes, inputs, outputs, weights=None):
    """Convert the graph (inputs and outputs typed as ``inputs`` and ``outputs`` say) and run it
    on the numpy engine."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(key, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                     for key, value in inputs.items()],
        [helper.make_tensor_value_info(key, elem_type, None) for key, elem_type in outputs.items()],
        [numpy_helper.from_array(value, key) for key, value in (weights or {}).items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "g.onnx")
    converter.convert(tmp_path / "g.onnx", tmp_path / "g.lite", verify=False)
    return lite.Model.load(tmp_path / "g.lite", device="numpy").predict(inputs)


def test_a_float16_graph_is_computed_in_float32_between_its_inputs_and_outputs(tmp_path):
    # (x + 64) - 64: float16 steps are 1/16 at 64, so rounding the sum kept x to the nearest
    # sixteenth; computed in float32 as ONNX Runtime does, x (in [0.5, 1), steps of 2^-11) comes
    # back exactly.
    nodes = [helper.make_node("Add", ["x", "c"], ["s"]), helper.make_node("Sub", ["s", "c"], ["y"])]
    x = rng.uniform(0.5, 1, (4, 64)).astype(np.float16)
    got = run_numpy(tmp_path, nodes, {"x": x}, {"y": TensorProto.FLOAT16}, {"c": np.array(64, np.float16)})["y"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, x)


def test_casts_round_to_float16_where_the_graph_does(tmp_path):
    """A float32 input cast to float16 keeps only float16's precision, and a float16 value cast
    to float is rounded to float16 first, as ONNX Runtime rounds before its own Casts."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Mul", ["h", "h"], ["square"]),
             helper.make_node("Cast", ["square"], ["y"], to=TensorProto.FLOAT),
             helper.make_node("Identity", ["h"], ["rounded"])]
    x = rng.uniform(1, 2, (3, 50)).astype(np.float32)
    got = run_numpy(tmp_path, nodes, {"x": x}, {"y": TensorProto.FLOAT, "rounded": TensorProto.FLOAT16})
    half_x = x.astype(np.float16)
    assert got["rounded"].dtype == np.float16 and got["y"].dtype == np.float32
    np.testing.assert_array_equal(got["rounded"], half_x)
    wide = half_x.astype(np.float32)
    np.testing.assert_array_equal(got["y"], (wide * wide).astype(np.float16).astype(np.float32))
