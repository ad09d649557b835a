"""Static int8 of an Add with a constant per-channel shift: DenseNet's pre-activation BatchNormalization.

After ``fold_scale_through_relu`` a BatchNormalization between a Concat and a Relu → Conv is one
Add of a constant vector. Its input and output are quantized anyway (the Concat's output, the
Conv's input), so the Add runs as QLinearAdd and its vector is stored as 8-bit integers; where the
Add would need new Q/DQ pairs it stays float.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.quantize.calibrate import collect_stats, ranges
from converter.quantize.config import QuantConfig
from converter.quantize.static import quantize_static
from lite.engines.numpy_engine import NumpyEngine
from lite.format import load, to_bytes
from lite.format.dtypes import DataType


def _initializers(rng: np.random.Generator, channels: int) -> list:
    arrays = {
        "gamma": rng.uniform(0.5, 2.0, channels), "beta": rng.normal(size=channels),
        "mean": rng.normal(size=channels), "var": rng.uniform(0.5, 2.0, channels),
        "w": rng.normal(size=(6, channels, 3, 3)), "head": rng.normal(size=(6, 5)),
    }
    return [numpy_helper.from_array(a.astype(np.float32), name) for name, a in arrays.items()]


def _densenet_block():
    """x, z → Concat → BatchNormalization → Relu → Conv → ReduceMean → Reshape → Gemm."""
    rng = np.random.default_rng(0)
    shape = numpy_helper.from_array(np.array([-1, 6], np.int64), "shape")
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    nodes = [
        helper.make_node("Concat", ["x", "z"], ["c"], name="concat", axis=1),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w"], ["h"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["h", "axes"], ["m"], name="mean", keepdims=1),
        helper.make_node("Reshape", ["m", "shape"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "head"], ["y"], name="head"),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2, 8, 8]) for n in ("x", "z")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                              [*_initializers(rng, 4), shape, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _quantize(proto):
    model = converter.convert_model(proto)
    rng = np.random.default_rng(1)
    data = [{"x": rng.normal(size=(2, 2, 8, 8)).astype(np.float32), "z": rng.normal(size=(2, 2, 8, 8)).astype(np.float32)}
            for _ in range(4)]
    config = QuantConfig()
    stats, _ = collect_stats(model, data, config)
    return model, quantize_static(model, ranges(stats, config), config), data[0]


def test_the_shift_is_stored_as_uint8_and_the_relu_goes():
    model, result, feeds = _quantize(_densenet_block())
    assert [n.op_type for n in model.main.nodes if n.op_type in ("Mul", "Add")] == ["Add"]  # the Mul went into the Conv
    add = next(n for n in result.model.main.nodes if n.op_type == "Add")
    assert add.name in result.quantized and result.removed == ["relu"]
    tensors = result.model.main.tensors
    shift = [tensors[i] for i in range(len(tensors)) if tensors[i].name.endswith("_shift_quantized")]
    assert len(shift) == 1 and shift[0].dtype == DataType.UINT8 and shift[0].quant.axis is None
    float_operands = [tensors[i].name for n in result.model.main.nodes if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                      for i in n.inputs if tensors[i].data is not None and tensors[i].dtype == DataType.FLOAT]
    assert float_operands == []
    reference = NumpyEngine(model).run(feeds)["y"]
    quantized = NumpyEngine(result.model).run(feeds)["y"]
    assert np.corrcoef(reference.ravel(), quantized.ravel())[0, 1] > 0.999


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_the_compact_file_reads_back_and_runs_on_both_engines(device):
    import lite

    if device == "cpu":
        pytest.importorskip("onnxruntime")
    model, result, feeds = _quantize(_densenet_block())
    data = to_bytes(result.model)
    assert to_bytes(load(data)) == data
    stored = [t for t in load(data).main.tensors if t.name.endswith("_shift_quantized")]
    assert len(stored) == 1
    expected = NumpyEngine(result.model).run(feeds)["y"]
    actual = lite.Model.load(data, device=device).predict(feeds)["y"]
    np.testing.assert_allclose(actual, expected, atol=0.05 * np.abs(expected).max())


def test_a_shift_that_would_need_new_pairs_stays_float():
    """A shift on a residual branch (RepVGG's identity BatchNormalization): its output is read by a
    float-typed Add of two activations, but its input is a graph input nothing else quantizes."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Add", ["x", "t"], ["s"], name="shift"),
        helper.make_node("Erf", ["s"], ["y"], name="erf"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 8])],
        [numpy_helper.from_array(rng.normal(size=(4, 1, 1)).astype(np.float32), "t")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = converter.convert_model(proto)
    config = QuantConfig()
    stats, _ = collect_stats(model, [rng.normal(size=(2, 4, 8, 8)).astype(np.float32)], config)
    result = quantize_static(model, ranges(stats, config), config)
    assert "shift" not in result.quantized
    reasons = {name: reason for name, _, reason in result.declined}
    assert "not quantized otherwise" in reasons["shift"]
    assert not any(n.op_type == "QuantizeLinear" for n in result.model.main.nodes)
