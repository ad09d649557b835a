"""A QuantizeLinear read only by a DequantizeLinear of the same parameters runs as one float step
(lite.engines.numpy_fake_quant), equal bit for bit to the two kernels and to ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node, op_types


def qdq_model(zero_point: np.ndarray, dequantize_zero_point: np.ndarray | None = None, scale: float = 0.05,
              shared: bool = False):
    """x -> Q(s, z) -> DQ(s, z') -> Relu -> y; ``shared``: the Q also feeds a second DQ."""
    b = GraphBuilder("qdq", opset=21 if zero_point.dtype.itemsize == 2 else 13)  # 16 bits: opset 21
    x = b.input("x", np.float32, ["N", 16])
    s = b.constant("s", np.array(scale, np.float32))
    q = b.node("QuantizeLinear", [x, s, b.constant("z", zero_point)])
    z2 = zero_point if dequantize_zero_point is None else dequantize_zero_point
    dq = b.node("DequantizeLinear", [q, s, b.constant("z2", z2)])
    y = b.node("Relu", [dq], outputs=["y"])
    b.output(y, np.float32, ["N", 16])
    if shared:
        other = b.node("DequantizeLinear", [q, s, b.constant("z3", z2)], outputs=["other"])
        b.output(other, np.float32, ["N", 16])
    return load(to_bytes(b.build()))


def inputs() -> dict[str, np.ndarray]:
    """Values over the whole range: halves that round to even, ones that saturate both ways,
    infinities."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 16)).astype(np.float32) * 4
    x[0, :8] = np.arange(8, dtype=np.float32) * 0.05 + 0.025  # exactly halfway between steps
    x[1, :4] = [1e6, -1e6, np.inf, -np.inf]
    return {"x": x}


@pytest.mark.parametrize("zero_point", [np.array(3, np.int8), np.array(128, np.uint8), np.array(-100, np.int8),
                                        np.array(0, np.int16)], ids=["int8", "uint8", "int8-low", "int16"])
def test_the_pair_is_one_step_equal_to_the_two_kernels_and_onnx_runtime(zero_point):
    model = qdq_model(zero_point)
    engine = NumpyEngine(model)
    assert "QuantizeLinear" not in op_types(engine)
    got = engine.run(inputs())["y"]
    np.testing.assert_array_equal(got, node_by_node(model, inputs())["y"])
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(_onnx(model), options, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, session.run(["y"], inputs())[0])


def _onnx(model) -> bytes:
    from lite.format.onnx.lower import lower_model

    return lower_model(model, external_weights=False).model.SerializeToString()


@pytest.mark.parametrize("case", ["other zero point", "two readers"])
def test_pairs_that_differ_or_share_the_quantized_tensor_stay_two_steps(case):
    model = (qdq_model(np.array(3, np.int8), np.array(4, np.int8)) if case == "other zero point"
             else qdq_model(np.array(3, np.int8), shared=True))
    engine = NumpyEngine(model)
    assert "QuantizeLinear" in op_types(engine)
    expected = node_by_node(model, inputs())
    for name, value in engine.run(inputs()).items():
        np.testing.assert_array_equal(value, expected[name])
