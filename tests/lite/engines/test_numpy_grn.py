"""The numpy engine's global response normalization (lite.engines.numpy_grn): ConvNeXt V2's GRN as
one step, computing what the nodes compute (to float32 rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_grn import GlobalResponseNorm
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node


def grn_model(*, dtype=np.float32, swap=False, spatial=(1, 2), channel=(-1,), norms_output=False, channels=6,
              linear=None):
    """x (N, H, W, C) -> gamma·(x·n) + beta + x with n = g / (mean_C(g) + eps), g = ||x||_2 over H, W:
    the nodes torch.export writes for ConvNeXt V2's GRN. ``linear``: "bias" or "scale" puts ConvNeXt V2's fc2
    after it, a MatMul and the Add of its bias, then with "scale" its layer scale, a Mul by a constant."""
    b = GraphBuilder("grn", opset=18)
    x = b.input("x", dtype, ["N", "H", "W", channels])
    rng = np.random.default_rng(1)
    gamma = b.constant("gamma", rng.standard_normal((1, 1, 1, channels)).astype(dtype))
    beta = b.constant("beta", rng.standard_normal((1, 1, 1, channels)).astype(dtype))
    norms = b.node("ReduceL2", [x, b.constant("spatial", np.array(spatial, np.int64))], outputs=["norms"], keepdims=1)
    mean = b.node("ReduceMean", [norms, b.constant("channel", np.array(channel, np.int64))], keepdims=1)
    eps = b.constant("eps", np.array(1e-6, dtype))
    shifted = b.node("Add", [eps, mean] if swap else [mean, eps])
    normalized = b.node("Div", [norms, shifted])
    scaled = b.node("Mul", [normalized, x] if swap else [x, normalized])
    weighted = b.node("Mul", [scaled, gamma] if swap else [gamma, scaled])
    shifted_back = b.node("Add", [beta, weighted] if swap else [weighted, beta])
    y = b.node("Add", [x, shifted_back] if swap else [shifted_back, x], outputs=["grn" if linear else "y"])
    if linear:
        weights = b.constant("weights", rng.standard_normal((channels, 4)).astype(dtype))
        y = b.node("Add", [b.node("MatMul", [y, weights]), b.constant("bias", rng.standard_normal(4).astype(dtype))],
                   outputs=["y" if linear == "bias" else "fc"])
        if linear == "scale":
            y = b.node("Mul", [y, b.constant("scale", rng.standard_normal(4).astype(dtype))], outputs=["y"])
    b.output(y, dtype, None)
    if norms_output:
        b.output("norms", dtype, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, GlobalResponseNorm)]


@pytest.mark.parametrize("options", [{}, {"swap": True}, {"dtype": np.float64}, {"spatial": (2, 1), "channel": (3,)}],
                         ids=["as-exported", "operands-swapped", "float64", "positive-axes"])
def test_the_block_is_one_step(options):
    model = grn_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1 and len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(4)
    for shape in [(1, 5, 7, 6), (2, 3, 3, 6), (1, 1, 1, 6)]:
        x = rng.standard_normal(shape).astype(options.get("dtype", np.float32))
        np.testing.assert_allclose(engine.run({"x": x})["y"], node_by_node(model, {"x": x})["y"], rtol=1e-5,
                                   atol=1e-6)


def test_other_inputs_run_the_nodes():
    model = grn_model()
    engine = NumpyEngine(model)
    step = fused(engine)[0]
    rng = np.random.default_rng(5)
    # A non-contiguous x, another dtype: the nodes' own kernels, the same values bit for bit.
    image = rng.standard_normal((1, 6, 4, 5)).astype(np.float32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(step.fn(image), node_by_node(model, {"x": image})["y"])
    wide = rng.standard_normal((1, 3, 3, 6))
    np.testing.assert_array_equal(step.fn(wide), node_by_node(model, {"x": wide})["y"])


@pytest.mark.parametrize("options", [{"norms_output": True}, {"spatial": (1,)}, {"channel": (1,)}],
                         ids=["norms-returned", "one-spatial-axis", "mean-over-rows"])
def test_blocks_that_are_not_grn_stay_apart(options):
    model = grn_model(**options)
    engine = NumpyEngine(model)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 4, 3, 6)).astype(np.float32)
    expected = node_by_node(model, {"x": x})["y"]
    np.testing.assert_allclose(engine.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
    if "norms_output" in options:
        assert not fused(engine)
    elif fused(engine):  # matched, but the axes do not fit: the step runs the nodes
        np.testing.assert_array_equal(engine.run({"x": x})["y"], expected)


@pytest.mark.parametrize("linear", ["bias", "scale"], ids=["fc2", "fc2-and-layer-scale"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_linear_layer_after_it_joins_the_step(linear, dtype):
    """(x·f + beta) @ W + b computed as x @ (f·W) + (beta @ W + b): one step with the MatMul, its
    bias and (as a product epilogue) the layer scale."""
    model = grn_model(linear=linear, dtype=dtype)
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    assert isinstance(getattr(step.fn, "product", step.fn), GlobalResponseNorm)
    rng = np.random.default_rng(7)
    for shape in [(1, 5, 7, 6), (2, 3, 3, 6), (1, 1, 1, 6)]:
        x = rng.standard_normal(shape).astype(dtype)
        np.testing.assert_allclose(engine.run({"x": x})["y"], node_by_node(model, {"x": x})["y"], rtol=1e-5,
                                   atol=1e-5)
    # Inputs the step does not take run the nodes, the MatMul among them.
    image = rng.standard_normal((1, 6, 4, 5)).astype(dtype).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(engine.run({"x": image})["y"], node_by_node(model, {"x": image})["y"], rtol=1e-6,
                               atol=1e-6)
