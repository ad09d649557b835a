"""The numpy engine's tanh-GELU fusion (lite.engines.numpy_gelu): GPT-2's gelu_new as one step,
computing what the nodes compute."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_gelu import FusedTanhGelu, TableGelu
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node


def tanh_gelu_model(*, exponent=3.0, swap=False, inner_output=False, half_type=np.float32):
    """x (N, T, 8) -> 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the nodes torch.export writes for gelu_new."""
    b = GraphBuilder("gelu_new", opset=18)
    x = b.input("x", np.float32, ["N", "T", 8])

    def constant(name, value, dtype=np.float32):
        return b.constant(name, np.array(value, dtype))

    half = b.node("Mul", [constant("half", 0.5, half_type), x] if swap else [x, constant("half", 0.5, half_type)])
    cubic = b.node("Mul", [b.node("Pow", [x, constant("three", exponent)]), constant("a", 0.044715)])
    total = b.node("Add", [cubic, x] if swap else [x, cubic])
    inner = b.node("Mul", [total, constant("k", math.sqrt(2 / math.pi))], outputs=["inner"])
    gate = b.node("Add", [constant("one", 1.0), b.node("Tanh", [inner])] if swap else [b.node("Tanh", [inner]), constant("one", 1.0)])
    b.output(b.node("Mul", [gate, half] if swap else [half, gate], outputs=["y"]), np.float32, None)
    if inner_output:
        b.output(inner, np.float32, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, FusedTanhGelu)]


@pytest.mark.parametrize("options", [{}, {"swap": True}], ids=["as exported", "operands swapped"])
def test_a_tanh_gelu_is_one_step(options):
    model = tanh_gelu_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    assert len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(21)
    for shape in [(1, 5, 8), (2, 3, 8)]:
        x = (3 * rng.standard_normal(shape)).astype(np.float32)
        got = engine.run({"x": x})["y"]
        wide = x.astype(np.float64)
        expected = 0.5 * wide * (1 + np.tanh(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide**3)))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got, node_by_node(model, {"x": x})["y"])


@pytest.mark.parametrize("options", [{"exponent": 2.0}, {"inner_output": True}, {"half_type": np.float64}],
                         ids=["a square", "the inner product returned", "a float64 half"])
def test_other_subgraphs_stay_as_they_are(options):
    model = tanh_gelu_model(**options)
    engine = NumpyEngine(model)
    assert not fused(engine)
    x = np.random.default_rng(22).standard_normal((2, 3, 8)).astype(np.float32)
    expected = node_by_node(model, {"x": x})
    for name, value in engine.run({"x": x}).items():
        np.testing.assert_array_equal(value, expected[name])


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    model = tanh_gelu_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    x = np.random.default_rng(23).standard_normal((2, 3, 8))  # float64: not the constants' type
    np.testing.assert_array_equal(step.fn(x), node_by_node(model, {"x": x})["y"])


# -- the exact Gelu node from a table -------------------------------------------------------------


def erf_gelu_model(dtype=np.float32, approximate="none"):
    b = GraphBuilder("gelu", opset=20)
    x = b.input("x", dtype, ["N", 4, 3, 3])
    b.output(b.node("Gelu", [x], outputs=["y"], approximate=approximate), dtype, None)
    return load(to_bytes(b.build()))


def test_the_exact_gelu_runs_from_the_table():
    engine = NumpyEngine(erf_gelu_model())
    (step,) = engine.plans[0].steps
    assert isinstance(step.fn, TableGelu)
    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal((2, 4, 3, 3))).astype(np.float32)
    wide = x.astype(np.float64)
    expected = wide * np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in wide.reshape(-1)]).reshape(x.shape)
    np.testing.assert_allclose(engine.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-7)


def test_the_table_against_math_erfc_over_the_line():
    from lite.ops.activations import Gelu

    gelu = TableGelu(Gelu)
    x = np.concatenate([np.linspace(-8, 12, 200_001, dtype=np.float32), np.float32(10) ** -np.arange(1, 30, dtype=np.float32)])
    wide = x.astype(np.float64)
    expected = wide * np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in wide.tolist()])
    got = gelu(x).astype(np.float64)
    # The linear step's relative error is below x²·(1/2048)²/2: 7.6e-6 at x = -8.
    assert np.all(np.abs(got - expected) <= 1e-5 * np.abs(expected) + 1e-30)
    assert np.abs(got - expected).max() < 5e-7
    special = gelu(np.array([np.nan, np.inf, 20, -20, 0], np.float32))
    assert np.isnan(special[0]) and special[1] == np.inf and special[2] == 20 and special[3] == 0 and special[4] == 0
    # A channels-last view comes back in the same layout with the same values.
    image = np.random.default_rng(2).standard_normal((1, 3, 3, 8)).astype(np.float32).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(gelu(image), Gelu(image), rtol=1e-5, atol=1e-7)
    assert gelu(image).strides == image.strides


@pytest.mark.parametrize("options", [{"dtype": np.float64}, {"approximate": "tanh"}], ids=["float64", "tanh"])
def test_other_gelus_take_the_kernel(options):
    engine = NumpyEngine(erf_gelu_model(**options))
    x = np.random.default_rng(3).standard_normal((1, 4, 3, 3)).astype(options.get("dtype", np.float32))
    np.testing.assert_array_equal(engine.run({"x": x})["y"], node_by_node(engine, {"x": x})["y"])


def test_the_bit_pattern_index_matches_the_rounded_index():
    """The fast path's nearest node (from the float32 sum's bits) is ``rint``'s: same values, bit
    for bit, as the two-clamp path, rounding ties included; NaN of either sign takes that path."""
    from lite.ops.activations import Gelu

    gelu = TableGelu(Gelu)
    rng = np.random.default_rng(7)
    # Over 12288 elements: the size from which the bit-pattern path runs.
    ties = (np.arange(-20481, 20482, dtype=np.float32) / 2048).astype(np.float32)  # u = k + 1/2 exactly
    x = np.concatenate([ties, 4 * rng.standard_normal(30000).astype(np.float32),
                        np.array([1e30, -1e30, 10.0, -10.0, np.inf], np.float32)]).reshape(-1, 1)
    np.testing.assert_array_equal(gelu(x), gelu._two_clamps(x))
    for nan in (np.float32(np.nan), -np.float32(np.nan)):
        with_nan = x.copy()
        with_nan[1234, 0] = nan
        got = gelu(with_nan)
        assert np.isnan(got[1234, 0])
        np.testing.assert_array_equal(np.delete(got, 1234), np.delete(gelu(x), 1234))
    assert gelu(np.float32(1.5)) == pytest.approx(1.5 * 0.5 * math.erfc(-1.5 / math.sqrt(2)), rel=1e-6)
