"""The numpy engine's rotary embedding fusion (lite.engines.numpy_rotary): which subgraphs become
one step, and that the step computes what the nodes compute, fused or run in turn."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_rotary import FusedRotaryEmbedding
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node

WIDTH = 8
END = np.iinfo(np.int64).max


def rotary_model(*, split=WIDTH // 2, end=END, axis=3, negate_first=False, rotated_output=False):
    """x (N, H, T, 8), cos, sin (N, 1, T, 8) -> x·cos + cat(-x[..., h:], x[..., :h])·sin, the nodes
    torch.export writes for Llama's apply_rotary_pos_emb."""
    b = GraphBuilder("rotary", opset=18)
    x = b.input("x", np.float32, ["N", 2, "T", WIDTH])
    cos, sin = (b.input(name, np.float32, ["N", 1, "T", WIDTH]) for name in ("cos", "sin"))

    def constant(name, value):
        return b.constant(name, np.array([value], np.int64))

    zero, middle, last, one, stop = (constant("zero", 0), constant("middle", split), constant("axis", axis),
                                     constant("one", 1), constant("end", end))
    lower = b.node("Slice", [x, zero, middle, last, one])
    upper = b.node("Slice", [x, middle, stop, last, one])
    if negate_first:
        rotated = b.node("Concat", [b.node("Neg", [lower]), upper], axis=-1, outputs=["rotated"])
    else:
        rotated = b.node("Concat", [b.node("Neg", [upper]), lower], axis=-1, outputs=["rotated"])
    y = b.node("Add", [b.node("Mul", [x, cos]), b.node("Mul", [rotated, sin])], outputs=["y"])
    b.output(y, np.float32, None)
    if rotated_output:
        b.output(rotated, np.float32, None)
    return load(to_bytes(b.build()))


def feeds(batch=1, length=5, seed=0):
    rng = np.random.default_rng(seed)
    angles = rng.standard_normal((batch, 1, length, WIDTH)).astype(np.float32)
    return {"x": rng.standard_normal((batch, 2, length, WIDTH)).astype(np.float32),
            "cos": np.cos(angles), "sin": np.sin(angles)}


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, FusedRotaryEmbedding)]


@pytest.mark.parametrize("options", [{}, {"axis": -1}, {"end": 2**62}], ids=["axis 3", "axis -1", "end 2**62"])
def test_a_rotary_embedding_is_one_step(options):
    model = rotary_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    assert len(engine.plans[0].steps) == 1
    for batch, length in [(1, 5), (2, 3)]:
        inputs = feeds(batch, length, seed=length)
        x = inputs["x"]
        rotated = np.concatenate([-x[..., WIDTH // 2:], x[..., :WIDTH // 2]], axis=-1)
        expected = x * inputs["cos"] + rotated * inputs["sin"]
        got = engine.run(inputs)["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])


@pytest.mark.parametrize("options", [{"negate_first": True}, {"rotated_output": True}],
                         ids=["first half negated", "rotation returned"])
def test_other_subgraphs_stay_as_they_are(options):
    model = rotary_model(**options)
    engine = NumpyEngine(model)
    assert not fused(engine)
    inputs = feeds()
    expected = node_by_node(model, inputs)
    for name, value in engine.run(inputs).items():
        np.testing.assert_array_equal(value, expected[name])


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    """A width other than twice the split point, another element type: the nodes run in turn."""
    uneven = rotary_model(split=3)
    engine = NumpyEngine(uneven)
    assert len(fused(engine)) == 1
    np.testing.assert_array_equal(engine.run(feeds())["y"], node_by_node(uneven, feeds())["y"])
    model = rotary_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    odd = feeds()
    odd = {name: np.concatenate([value, value[..., :2]], axis=-1) for name, value in odd.items()}  # width 10
    np.testing.assert_array_equal(step.fn(odd["x"], odd["cos"], odd["sin"]), node_by_node(model, odd)["y"])
    wide = {name: value.astype(np.float64) for name, value in feeds().items()}
    wide["cos"] = wide["cos"].astype(np.float32)
    np.testing.assert_array_equal(step.fn(wide["x"], wide["cos"], wide["sin"]), node_by_node(model, wide)["y"])
