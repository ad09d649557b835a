"""The numpy engine's tanh-GELU fusion (lite.engines.numpy_gelu): GPT-2's gelu_new as one step,
computing what the nodes compute."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_gelu import FusedTanhGelu
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
