"""The numpy engine's planning: constants as kernels see them."""

from __future__ import annotations

import numpy as np

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from lite.ops import _depthwise


def depthwise_model():
    weights = np.random.default_rng(4)
    b = GraphBuilder("depthwise", opset=13)
    x = b.input("x", np.float32, ["N", 8, 6, 6])
    w = b.constant("w", weights.standard_normal((8, 1, 3, 3)).astype(np.float32))
    bias = b.constant("b", weights.standard_normal(8).astype(np.float32))
    steps = b.constant("steps", np.arange(3, dtype=np.int64))
    y = b.node("Conv", [x, w, bias], group=8, pads=[1, 1, 1, 1])
    b.output(b.node("Add", [y, b.node("Cast", [b.node("ReduceSum", [steps])], to=1)], outputs=["y"]),
             np.float32, ["N", 8, 6, 6])
    return load(to_bytes(b.build()))


def test_constants_carry_numpys_own_dtypes():
    """The reader's little-endian dtypes equal the native ones but are other objects; numpy then
    answers np.asarray(w, dtype=np.float32) with a new view on every call."""
    engine = NumpyEngine(depthwise_model())
    arrays = [value for value in engine.plans[0].constants.values() if isinstance(value, np.ndarray)]
    assert arrays
    for value in arrays:
        assert value.dtype.isbuiltin
        assert np.asarray(value, dtype=value.dtype.type) is value


def test_depthwise_weights_are_laid_out_once_over_many_runs(monkeypatch):
    laid_out = []
    original = _depthwise._Geometry.lay_out

    def counting(self, w):
        laid_out.append(w.shape)
        return original(self, w)

    monkeypatch.setattr(_depthwise._Geometry, "lay_out", counting)
    _depthwise._geometry.cache_clear()
    engine = NumpyEngine(depthwise_model())
    x = np.random.default_rng(5).standard_normal((1, 8, 6, 6)).astype(np.float32)
    first = engine.run({"x": x})["y"]
    for _ in range(3):
        np.testing.assert_array_equal(engine.run({"x": x})["y"], first)
    assert len(laid_out) == 1


def linear_model():
    weights = np.random.default_rng(6)
    b = GraphBuilder("linear", opset=13)
    x = b.input("x", np.float32, ["N", "T", 16])
    w = b.constant("w", weights.standard_normal((16, 24)).astype(np.float32))
    bias = b.constant("b", weights.standard_normal(24).astype(np.float32))
    b.output(b.node("Add", [b.node("MatMul", [x, w]), bias], outputs=["y"]), np.float32, ["N", "T", 24])
    return load(to_bytes(b.build()))


def test_a_linear_layer_is_one_step_for_every_input_shape():
    """MatMul by constant weights + constant bias: one step adding the bias in place, its full
    shape kept per product shape."""
    model = linear_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    constants = engine.plans[0].constants
    w, bias = constants[engine.plans[0].index_of["w"]], constants[engine.plans[0].index_of["b"]]
    rng = np.random.default_rng(7)
    for shape in [(1, 5, 16), (2, 3, 16), (1, 5, 16), (3, 700, 16)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = engine.run({"x": x})["y"]
        np.testing.assert_allclose(got, x @ w + bias, rtol=1e-5, atol=1e-5)
    assert len(step.fn.full) == 3
