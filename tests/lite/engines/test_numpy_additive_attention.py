"""The numpy engine's fusion of SwiftFormer's additive attention
(lite.engines.numpy_additive_attention): one step computing what the nodes compute."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_additive_attention import AdditiveAttention
from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node


def additive_attention_model(*, tokens=6, width=4, expand=True, softmax_axis=-1, swap=False, pooled_output=False):
    """q, k (N, T, D) -> k * Tile(Unsqueeze(ReduceSum(Softmax(q @ w) * q, 1), 1), (1, T, 1)), as
    torch.export writes transformers' SwiftFormerEfficientAdditiveAttention."""
    b = GraphBuilder("additive", opset=18)
    q = b.input("q", np.float32, ["N", tokens, width])
    k = b.input("k", np.float32, ["N", tokens, width])
    rng = np.random.default_rng(4)
    w = b.constant("w", rng.standard_normal((width, 1)).astype(np.float32))
    scores = b.node("Softmax", [b.node("MatMul", [q, w])], axis=softmax_axis)
    weighted = b.node("Mul", [q, scores] if swap else [scores, q])
    pooled = b.node("ReduceSum", [weighted, b.constant("axes", np.array([1], np.int64))], keepdims=0,
                    outputs=["pooled"])
    pooled = b.node("Unsqueeze", [pooled, b.constant("axis", np.array([1], np.int64))])
    if expand:
        pooled = b.node("Expand", [pooled, b.constant("ones", np.array([1, 1, 1], np.int64))])
    tiled = b.node("Tile", [pooled, b.constant("repeats", np.array([1, tokens, 1], np.int64))])
    b.output(b.node("Mul", [k, tiled] if swap else [tiled, k], outputs=["y"]), np.float32, None)
    if pooled_output:
        b.output("pooled", np.float32, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, AdditiveAttention)]


@pytest.mark.parametrize("options", [{}, {"expand": False}, {"swap": True}, {"softmax_axis": 2}],
                         ids=["as exported", "no Expand", "operands swapped", "axis 2"])
def test_the_block_is_one_step(options):
    model = additive_attention_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1 and len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(7)
    for batch in (1, 3):
        inputs = {name: rng.standard_normal((batch, 6, 4)).astype(np.float32) for name in ("q", "k")}
        np.testing.assert_allclose(engine.run(inputs)["y"], node_by_node(model, inputs)["y"], rtol=1e-6, atol=1e-6)


def test_an_infinite_score_gives_nan_as_the_softmax_does():
    model = additive_attention_model()
    engine = NumpyEngine(model)
    q = np.ones((1, 6, 4), np.float32)
    q[0, 2, 0] = np.inf
    inputs = {"q": q, "k": np.ones((1, 6, 4), np.float32)}
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(engine.run(inputs)["y"], node_by_node(model, inputs)["y"])


def test_a_pooled_value_read_elsewhere_keeps_the_nodes():
    engine = NumpyEngine(additive_attention_model(pooled_output=True))
    assert not fused(engine)


def test_other_shapes_run_the_nodes():
    model = additive_attention_model()
    kernel = fused(NumpyEngine(model))[0].fn
    rng = np.random.default_rng(8)
    q = rng.standard_normal((1, 6, 4)).astype(np.float64)
    k = rng.standard_normal((1, 6, 4)).astype(np.float64)
    np.testing.assert_allclose(kernel(q, k), node_by_node(model, {"q": q, "k": k})["y"], rtol=1e-12)
