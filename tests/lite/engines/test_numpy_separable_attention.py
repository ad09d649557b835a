"""The numpy engine's fusion of MobileViTV2's separable self-attention
(lite.engines.numpy_separable_attention): one step computing what the nodes compute."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_separable_attention import SeparableAttention
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node

WIDTH = 6


def separable_attention_model(*, expand="shape", swap=False, softmax_axis=-1, weights_output=False,
                              sizes=(1, WIDTH, WIDTH)):
    """x (N, 1 + 2·D, P, T) -> relu(v) · Expand(ReduceSum(k · Softmax(q), -1)), as torch.export
    writes transformers' MobileViTV2LinearSelfAttention (``expand``: "shape" reads the target from
    x's Shape, "constant" takes a constant one, None leaves the broadcast to the Mul)."""
    b = GraphBuilder("separable", opset=18)
    x = b.input("x", np.float32, ["N", 1 + 2 * WIDTH, "P", "T"])
    q, k, v = b.node("Split", [x, b.constant("sizes", np.array(sizes, np.int64))], axis=1, outputs=["q", "k", "v"])
    weights = b.node("Softmax", [q], axis=softmax_axis, outputs=["weights"])
    weighted = b.node("Mul", [weights, k] if swap else [k, weights])
    context = b.node("ReduceSum", [weighted, b.constant("axes", np.array([-1], np.int64))], keepdims=1)
    if expand == "shape":
        # Out to v's last two dimensions, read from x (v itself is read by the Relu alone).
        context = b.node("Expand", [context, b.node("Shape", [x], start=2)])
    elif expand == "constant":
        context = b.node("Expand", [context, b.constant("target", np.array([1, 1, 1, 1], np.int64))])
    gated = b.node("Relu", [v])
    b.output(b.node("Mul", [context, gated] if swap else [gated, context], outputs=["y"]), np.float32, None)
    if weights_output:
        b.output("weights", np.float32, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, SeparableAttention)]


@pytest.mark.parametrize("options", [{}, {"expand": None}, {"expand": "constant"}, {"swap": True}],
                         ids=["as exported", "no Expand", "constant Expand target", "operands swapped"])
def test_the_block_is_one_step(options):
    model = separable_attention_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    assert [step.node.op_type for step in engine.plans[0].steps if step.node.op_type != "Shape"] == ["Mul"]
    rng = np.random.default_rng(3)
    for shape in [(1, 1 + 2 * WIDTH, 4, 16), (2, 1 + 2 * WIDTH, 3, 5), (1, 1 + 2 * WIDTH, 4, 16)]:
        x = rng.standard_normal(shape).astype(np.float32)
        x[..., ::3] *= 10
        got = engine.run({"x": x})["y"]
        # The same kernels on the same operands: the same float32 values.
        np.testing.assert_array_equal(got, node_by_node(model, {"x": x})["y"])
        wide = x.astype(np.float64)
        weights = np.exp(wide[:, :1] - wide[:, :1].max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        expected = np.maximum(wide[:, 1 + WIDTH:], 0) * (wide[:, 1:1 + WIDTH] * weights).sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_inputs_the_step_does_not_handle_run_the_nodes_in_turn():
    """An Expand target that enlarges the product, and float64 input: the block's kernels in turn."""
    model = separable_attention_model(expand="constant")
    engine = NumpyEngine(model)
    (step,) = fused(engine)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 1 + 2 * WIDTH, 3, 4)).astype(np.float32)
    larger = np.array([2, 1, 1, 1], np.int64)
    constants = engine.plans[0].constants
    args = [x, *[constants[index] for index in step.inputs[1:-1]], larger]
    got = step.fn(*args)
    assert got.shape == (2, WIDTH, 3, 4)
    expected = np.maximum(x[:, 1 + WIDTH:], 0) * np.broadcast_to(
        (x[:, 1:1 + WIDTH] * node_softmax(x[:, :1])).sum(axis=-1, keepdims=True), (2, WIDTH, 3, 1))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    wide = x.astype(np.float64)
    np.testing.assert_array_equal(engine.run({"x": wide})["y"], node_by_node(model, {"x": wide})["y"])


def node_softmax(q):
    weights = np.exp(q - q.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("options", [{"weights_output": True}, {"softmax_axis": 2}],
                         ids=["weights returned", "softmax over another axis"])
def test_blocks_that_differ_stay_as_they_are(options):
    model = separable_attention_model(**options)
    engine = NumpyEngine(model)
    assert not fused(engine)
    x = np.random.default_rng(1).standard_normal((1, 1 + 2 * WIDTH, 3, 4)).astype(np.float32)
    expected = node_by_node(model, {"x": x})
    for name, value in engine.run({"x": x}).items():
        np.testing.assert_array_equal(value, expected[name])
