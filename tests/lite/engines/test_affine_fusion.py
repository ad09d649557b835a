"""The numpy engine's per-channel affine fusion (lite.engines.affine_fusion)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node, op_types


def affine_model(*, relu=True, scale_shape=(8, 1, 1), product_output=False, swap=False):
    """x -> Mul(s) -> Add(t) [-> Relu] -> y."""
    rng = np.random.default_rng(41)
    b = GraphBuilder("affine", opset=13)
    x = b.input("x", np.float32, ["N", 8, 5, 6])
    scale = b.constant("s", rng.standard_normal(scale_shape).astype(np.float32))
    shift = b.constant("t", rng.standard_normal((1, 8, 1, 1)).astype(np.float32))
    product = b.node("Mul", [scale, x] if swap else [x, scale], outputs=["product"])
    y = b.node("Add", [shift, product] if swap else [product, shift], outputs=["y"] if not relu else 1)
    if relu:
        y = b.node("Relu", [y], outputs=["y"])
    b.output(y, np.float32, None)
    if product_output:
        b.output(product, np.float32, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("options", [{}, {"relu": False}, {"swap": True}],
                         ids=["with relu", "no relu", "constants first"])
def test_a_per_channel_affine_map_is_one_step_with_the_same_floats(options):
    engine = NumpyEngine(affine_model(**options))
    assert op_types(engine) == ["Mul"]
    rng = np.random.default_rng(42)
    for batch in (1, 3):
        feeds = {"x": rng.standard_normal((batch, 8, 5, 6)).astype(np.float32)}
        np.testing.assert_array_equal(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"])


@pytest.mark.parametrize("options", [{"product_output": True}, {"scale_shape": (8, 5, 1)}],
                         ids=["product read elsewhere", "not per channel"])
def test_maps_that_are_not_per_channel_affine_keep_their_mul(options):
    # The Mul stays; the Add of the per-channel shift and its Relu are still one step.
    engine = NumpyEngine(affine_model(**options))
    assert op_types(engine) == ["Mul", "Add"]
    feeds = {"x": np.random.default_rng(46).standard_normal((2, 8, 5, 6)).astype(np.float32)}
    np.testing.assert_array_equal(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"])


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    engine = NumpyEngine(affine_model())
    (step,) = engine.plans[0].steps
    rng = np.random.default_rng(43)
    for x in [rng.standard_normal((2, 8, 5, 6)),  # float64
              rng.standard_normal((8, 5, 6)).astype(np.float32),  # not an image: broadcast as the nodes do
              np.ascontiguousarray(rng.standard_normal((2, 5, 6, 8)).astype(np.float32)).transpose(0, 3, 1, 2)]:
        expected = node_by_node(engine, {"x": x})["y"]
        got = step.fn(x)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def shift_model(*, relu=True, swap=False):
    """x -> Add(t) [-> Relu] -> y: a BatchNormalization whose scale the converter moved into the next Conv."""
    rng = np.random.default_rng(44)
    b = GraphBuilder("shift", opset=13)
    x = b.input("x", np.float32, ["N", 8, 5, 6])
    shift = b.constant("t", rng.standard_normal((8, 1, 1)).astype(np.float32))
    y = b.node("Add", [shift, x] if swap else [x, shift], outputs=["y"] if not relu else 1)
    if relu:
        y = b.node("Relu", [y], outputs=["y"])
    b.output(y, np.float32, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("swap", [False, True], ids=["shift second", "shift first"])
def test_a_per_channel_shift_and_its_relu_are_one_step_with_the_same_floats(swap):
    engine = NumpyEngine(shift_model(swap=swap))
    assert op_types(engine) == ["Add"]
    rng = np.random.default_rng(45)
    for x in (rng.standard_normal((2, 8, 5, 6)).astype(np.float32), rng.standard_normal((8, 5, 6)).astype(np.float32)):
        np.testing.assert_array_equal(engine.run({"x": x})["y"], node_by_node(engine, {"x": x})["y"])


def test_a_shift_without_a_relu_stays_one_add():
    engine = NumpyEngine(shift_model(relu=False))
    assert op_types(engine) == ["Add"]
    assert not isinstance(engine.plans[0].steps[0].fn, type(NumpyEngine(shift_model()).plans[0].steps[0].fn))
