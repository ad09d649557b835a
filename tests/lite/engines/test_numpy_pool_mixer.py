"""The numpy engine's PoolFormer token mixer (lite.engines.numpy_pool_mixer): a 3x3 average pool
less its input as one step, computing what the nodes compute."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_pool_mixer import PoolMixer
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node


def pool_model(*, subtract=True, count_include_pad=0, pads=(1, 1, 1, 1), pooled_output=False, dtype=np.float32,
               residual=False):
    """x (N, 5, H, W) -> AveragePool(x) - x, then with ``residual`` r + scale * (that), as PoolFormer writes it."""
    b = GraphBuilder("pool_mixer", opset=18)
    x = b.input("x", dtype, ["N", 5, "H", "W"])
    pooled = b.node("AveragePool", [x], outputs=["pooled"], kernel_shape=[3, 3], strides=[1, 1], pads=list(pads),
                    count_include_pad=count_include_pad)
    if residual:
        r = b.input("r", dtype, ["N", 5, "H", "W"])
        scale = b.constant("scale", np.linspace(0.5, 2, 5, dtype=dtype).reshape(5, 1, 1))
        mixed = b.node("Mul", [scale, b.node("Sub", [pooled, x])])
        b.output(b.node("Add", [r, mixed], outputs=["y"]), dtype, None)
        return load(to_bytes(b.build()))
    b.output(b.node("Sub", [pooled, x], outputs=["y"]) if subtract else pooled, dtype, None)
    if pooled_output and subtract:
        b.output("pooled", dtype, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, PoolMixer)]


@pytest.mark.parametrize("options", [{}, {"subtract": False}, {"dtype": np.float64}],
                         ids=["pool less x", "the pool alone", "float64"])
def test_the_mixer_is_one_step(options):
    model = pool_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1 and len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(9)
    output = "y" if options.get("subtract", True) else "pooled"
    # Up to 64 pixels the window-weight product, above it the shifted slices.
    for shape in [(1, 5, 6, 7), (2, 5, 1, 3), (1, 5, 2, 2), (1, 5, 1, 1), (1, 5, 8, 8), (2, 5, 9, 8)]:
        x = rng.standard_normal(shape).astype(options.get("dtype", np.float32))
        np.testing.assert_allclose(engine.run({"x": x})[output], node_by_node(model, {"x": x})[output],
                                   rtol=1e-6, atol=1e-6)
    # A channels-last input (a convolution's output) gives the same values.
    x = rng.standard_normal((1, 4, 4, 5)).astype(options.get("dtype", np.float32)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(fused(engine)[0].fn(x), node_by_node(model, {"x": x})[output], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_layer_scale_and_the_residual_join_the_step(dtype):
    model = pool_model(residual=True, dtype=dtype)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1 and len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(6)
    inputs = {name: rng.standard_normal((2, 5, 4, 3)).astype(dtype) for name in ("x", "r")}
    np.testing.assert_allclose(engine.run(inputs)["y"], node_by_node(model, inputs)["y"], rtol=1e-6, atol=1e-6)
    # Inputs it does not take (a residual of another type) run the nodes.
    inputs["r"] = inputs["r"].astype(np.float16)
    np.testing.assert_allclose(fused(engine)[0].fn(inputs["x"], inputs["r"]), node_by_node(model, inputs)["y"],
                               rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("options", [{"count_include_pad": 1}, {"pads": (0, 0, 0, 0)}],
                         ids=["padding counted", "no padding"])
def test_other_pools_stay_as_they_are(options):
    assert not fused(NumpyEngine(pool_model(**options)))


def test_a_pool_read_elsewhere_is_fused_alone():
    engine = NumpyEngine(pool_model(pooled_output=True))
    assert [type(step.fn).__name__ for step in engine.plans[0].steps][0] == "PoolMixer"
    assert len(engine.plans[0].steps) == 2
    x = np.random.default_rng(1).standard_normal((1, 5, 4, 4)).astype(np.float32)
    got, expected = engine.run({"x": x}), node_by_node(engine, {"x": x})
    for name in ("y", "pooled"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6)
