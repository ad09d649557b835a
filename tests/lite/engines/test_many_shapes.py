"""A model served more input shapes than its steps keep plans for: the numpy engine's results stay
ONNX Runtime's, its per-shape caches stay within their bounds, and a cycle through a few dozen
sequence lengths stays planned (no entry worked out again on the second round)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from converter import convert_model  # noqa: E402
from lite.engines.numpy_engine import NumpyEngine  # noqa: E402
from lite.format import load  # noqa: E402
from lite.ops import _gemm_blocks  # noqa: E402
from lite.plan_cache import SHAPES_KEPT, PlanCache  # noqa: E402
from tests.lite.engines.models import cnn  # noqa: E402

WIDTH = 32


def encoder_layer() -> onnx.ModelProto:
    """x (1, T, 16) -> linear -> LayerNormalization -> self-attention -> heads (1, 8, T, 4): a bias
    added at the product's shape, a per-shape norm plan, and a reshape target computed from x's shape."""
    rng = np.random.default_rng(0)
    constants = {
        "w": rng.standard_normal((16, WIDTH)).astype(np.float32) * 0.3,
        "b": rng.standard_normal(WIDTH).astype(np.float32),
        "gamma": rng.standard_normal(WIDTH).astype(np.float32),
        "beta": rng.standard_normal(WIDTH).astype(np.float32),
        "first_two": np.array([0], np.int64), "two": np.array([2], np.int64),
        "heads": np.array([8, 4], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["product"]),
        helper.make_node("Add", ["product", "b"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["n"], axis=-1),
        helper.make_node("Transpose", ["n"], ["n_t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["n", "n_t"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "n"], ["context"]),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Slice", ["x_shape", "first_two", "two"], ["batch_and_length"]),
        helper.make_node("Concat", ["batch_and_length", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["context", "target"], ["split"]),
        helper.make_node("Transpose", ["split"], ["y"], perm=[0, 2, 1, 3]),
    ]
    graph = helper.make_graph(nodes, "encoder_layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(value, name) for name, value in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def caches_of(engine: NumpyEngine) -> list[PlanCache]:
    """Every PlanCache the engine's steps reach (their kernels, prepared state, memos and the
    steps fused into them), and the products' global plans."""
    found: dict[int, PlanCache] = {id(_gemm_blocks._plans): _gemm_blocks._plans}
    seen: set[int] = set()

    def walk(value, depth: int) -> None:
        if id(value) in seen or depth > 5:
            return
        seen.add(id(value))
        if isinstance(value, PlanCache):
            found[id(value)] = value
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, (type, np.ndarray)):
            for item in vars(value).values():
                walk(item, depth + 1)

    for step in engine.plans[0].steps:
        walk(step, 0)
    return list(found.values())


def x_of(length: int) -> np.ndarray:
    return np.random.default_rng(length).standard_normal((1, length, 16)).astype(np.float32)


def test_more_lengths_than_the_bound_give_onnxruntime_results_and_bounded_caches():
    model = encoder_layer()
    engine = NumpyEngine(convert_model(model))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for length in [*range(1, SHAPES_KEPT + 17), 3, 1, SHAPES_KEPT + 16]:
        x = x_of(length)
        np.testing.assert_allclose(engine.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    caches = caches_of(engine)
    assert len(caches) >= 3
    for cache in caches:
        assert len(cache) <= cache.entries
        assert cache.nbytes <= cache.budget or len(cache) == 1
    assert max(len(cache) for cache in caches) == SHAPES_KEPT  # a bound was reached, and held


def test_a_cycle_through_more_lengths_than_before_stays_planned():
    """24 sequence lengths round-robin: the second round finds every bias operand the first made
    (the caches emptied themselves at 16 shapes and worked each one out again)."""
    engine = NumpyEngine(convert_model(encoder_layer()))
    (step,) = [step for step in engine.plans[0].steps if hasattr(step.fn, "full")]
    lengths = range(8, 32)
    inputs = [{"x": x_of(length)} for length in lengths]
    for feeds in inputs:
        engine.run(feeds)
    first = {key: id(value) for key, value in step.fn.full.items()}
    for feeds in inputs:
        engine.run(feeds)
    assert len(first) == len(lengths) and {key: id(value) for key, value in step.fn.full.items()} == first


def test_a_cycle_past_the_byte_budget_keeps_every_shape_planned():
    """Bias operands past a cache's byte budget stay broadcast rows: every shape keeps its entry
    (evicting the least recently used would evict each before its next use in a cycle)."""
    engine = NumpyEngine(convert_model(encoder_layer()))
    (step,) = [step for step in engine.plans[0].steps if hasattr(step.fn, "full")]
    step.fn.full = PlanCache(budget=8 * 1024)  # 2 KiB (16 rows of 32) to 4 KiB an operand here
    session = ort.InferenceSession(encoder_layer().SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):
        for length in range(16, 40):
            x = x_of(length)
            np.testing.assert_allclose(engine.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert len(step.fn.full) == 24 and step.fn.full.nbytes <= 8 * 1024


def test_a_cycle_through_rising_batch_sizes_keeps_one_arena():
    """The activation arena plans each request for the largest size it has had: after one round
    of batch sizes 1-6, later rounds are served from one arena (it was planned again, and its
    pages faulted in, for each larger batch)."""
    engine = NumpyEngine(load(cnn()))
    fresh = NumpyEngine(load(cnn()))
    inputs = [np.random.default_rng(n).standard_normal((n, 3, 16, 16)).astype(np.float32) for n in range(1, 7)]
    for x in inputs:
        engine.run({"x": x})
    arena = engine.pool._state().arena
    for x in inputs * 2:
        np.testing.assert_array_equal(engine.run({"x": x})["probabilities"], fresh.run({"x": x})["probabilities"])
    assert engine.pool._state().arena is arena
