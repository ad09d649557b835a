"""The engine-filled kernel parameters: ``fused_activation`` and ``allocate`` (lite.ops.registry),
and the numpy engine's buffer pool on the other side of ``allocate``.

A kernel that applies the fused activation itself must give bit-for-bit what the engine gives
by applying it afterwards (float16, which Conv and Gemm compute in float32, gets it before the
one rounding to float16); a kernel given ``allocate`` must give what it gives without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from lite.ops import (
    KERNELS,
    _conv_blocks,
    _conv_gemm,
    _depthwise,
    _phase_grid,
    conv,
    fused_activation,
    max_pool,
)
from tests.lite.ops._reference import assert_same_across_threads, check_against_reference

rng = np.random.default_rng(2024)

ACTIVATIONS = [("Relu", ()), ("Clip", (0.0, 6.0)), ("LeakyRelu", (0.1,)), ("Sigmoid", ()), ("HardSwish", ())]

CONV_PATHS = {
    "general": ((1, 5, 9, 10), (6, 5, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    "grouped": ((2, 4, 9, 10), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 2, 1]}),
    "pointwise": ((2, 8, 6, 6), (16, 8, 1, 1), {"strides": [2, 2]}),
    "depthwise": ((1, 6, 9, 9), (12, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    "depthwise channels-last": ((1, 192, 7, 7), (192, 1, 3, 3), {"group": 192, "pads": [1, 1, 1, 1]}),
}


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def counting_allocator():
    calls = []

    def allocate(shape, dtype):
        calls.append((tuple(shape), np.dtype(dtype)))
        # Garbage, not zeros: a kernel must not rely on fresh memory being cleared.
        return np.full(shape, 12345, dtype=dtype) if np.dtype(dtype).kind == "f" else np.empty(shape, dtype)

    return allocate, calls


def test_registry_reports_engine_parameters_and_not_as_attributes():
    conv_kernel = KERNELS.select("Conv", "", 13)
    assert conv_kernel.wants_fused_activation and conv_kernel.wants_allocate
    assert not conv_kernel.accepts("fused_activation") and not conv_kernel.accepts("allocate")
    relu = KERNELS.select("Relu", "", 14)
    assert not relu.wants_fused_activation and relu.wants_allocate and not relu.accepts("allocate")
    sigmoid = KERNELS.select("Sigmoid", "", 13)
    assert not sigmoid.wants_fused_activation and not sigmoid.wants_allocate


@pytest.mark.parametrize("path", CONV_PATHS)
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a[0])
def test_conv_fused_activation_is_exactly_the_engines(monkeypatch, path, activation):
    # Outputs below SMALL_ARRAY_BYTES may skip allocate (lite.ops.registry): not these.
    monkeypatch.setattr(_conv_gemm, "SMALL_ARRAY_BYTES", 0)
    monkeypatch.setattr(_depthwise, "SMALL_ARRAY_BYTES", 0)
    monkeypatch.setattr(_phase_grid, "SMALL_ARRAY_BYTES", 0)
    x_shape, w_shape, attributes = CONV_PATHS[path]
    x, w, b = normal(*x_shape), normal(*w_shape), normal(w_shape[0])
    expected = fused_activation.apply(conv.Conv(x, w, b, **attributes), *activation)
    allocate, calls = counting_allocator()
    got = conv.Conv(x, w, b, fused_activation=activation, allocate=allocate, **attributes)
    np.testing.assert_array_equal(got, expected)
    assert calls, "the kernel should take its output from allocate"


@pytest.mark.parametrize("path", CONV_PATHS)
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a[0])
def test_float16_conv_applies_the_activation_in_float32_before_the_one_rounding(path, activation):
    # As ONNX Runtime runs float16 on CPUs: rounding before the activation (and computing it in
    # float16) put a HardSwish 1.5 float16 steps off the float32 result.
    x_shape, w_shape, attributes = CONV_PATHS[path]
    x, w, b = normal(*x_shape, dtype=np.float16), normal(*w_shape, dtype=np.float16), normal(w_shape[0], dtype=np.float16)
    wide = [value.astype(np.float32) for value in (x, w, b)]
    expected = fused_activation.apply(conv.Conv(*wide, **attributes), *activation).astype(np.float16)
    got = conv.Conv(x, w, b, fused_activation=activation, **attributes)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a[0])
def test_float16_gemm_applies_the_activation_in_float32_before_the_one_rounding(activation):
    a, b, c = normal(5, 7, dtype=np.float16), normal(4, 7, dtype=np.float16), normal(4, dtype=np.float16)
    gemm = KERNELS.select("Gemm", "", 13).fn
    attributes = {"transB": 1, "alpha": 0.5, "beta": 2.0}
    wide = [value.astype(np.float32) for value in (a, b, c)]
    expected = fused_activation.apply(gemm(*wide, **attributes), *activation).astype(np.float16)
    got = gemm(a, b, c, fused_activation=activation, **attributes)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a[0])
def test_gemm_fused_activation_is_exactly_the_engines(activation):
    a, b, c = normal(5, 7), normal(4, 7), normal(4)
    attributes = {"transB": 1, "alpha": 0.5, "beta": 2.0}
    expected = fused_activation.apply(KERNELS.select("Gemm", "", 13).fn(a, b, c, **attributes), *activation)
    allocate, _ = counting_allocator()
    got = KERNELS.select("Gemm", "", 13).fn(a, b, c, fused_activation=activation, allocate=allocate, **attributes)
    np.testing.assert_array_equal(got, expected)


def test_conv_blocks_match_the_reference(monkeypatch):
    """Tiny block budgets: im2col over several row chunks, depthwise over several bands of rows
    (channels-last) and several channel blocks (taps): each path's loop boundaries."""
    monkeypatch.setattr(_conv_blocks, "_COLUMNS_BYTES", 512)
    monkeypatch.setattr(_conv_gemm, "_WHOLE_COLUMNS_BYTES", 0)
    monkeypatch.setattr(_depthwise, "_DEPTHWISE_SCRATCH_ELEMENTS", 600)
    cases = [
        ((2, 3, 11, 9), (4, 3, 3, 3), {"pads": [1, 2, 0, 1], "strides": [2, 1], "dilations": [1, 2]}),
        ((1, 4, 7, 6, 5), (4, 2, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 0, 1, 1]}),
        ((2, 6, 30, 30), (8, 6, 1, 1), {}),
        ((2, 5, 12, 11), (10, 1, 3, 3), {"group": 5, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ]
    for x_shape, w_shape, attributes in cases:
        bias = normal(w_shape[0])
        check_against_reference("Conv", [normal(*x_shape), normal(*w_shape), bias], attributes, opset=11)


def test_max_pool_blocks_match_the_reference(monkeypatch):
    monkeypatch.setattr(max_pool, "_BLOCK_ELEMENTS", 50)
    attributes = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    check_against_reference("MaxPool", [normal(2, 5, 13, 12)], attributes, opset=12)


def test_max_pool_window_entirely_in_padding_is_lowest():
    x = normal(1, 1, 2, 2)
    y = max_pool.MaxPool(x, kernel_shape=[1, 1], pads=[1, 1, 1, 1])
    assert y.shape == (1, 1, 4, 4)
    assert np.isneginf(y[0, 0, 0]).all() and np.array_equal(y[0, 0, 1:3, 1:3], x[0, 0])


# -- the engine's buffer pool -----------------------------------------------------------------


def conv_chain_model(seed: int = 0):
    """Conv(+Relu fused) -> MaxPool -> Conv -> output: outputs and intermediates above the
    pool's 64 KiB floor, so every buffer goes through the plan."""
    weights = np.random.default_rng(seed)
    b = GraphBuilder("chain", opset=13)
    x = b.input("x", np.float32, ["N", 4, 64, 64])
    w1 = b.constant("w1", weights.standard_normal((8, 4, 3, 3)).astype(np.float32))
    w2 = b.constant("w2", weights.standard_normal((8, 8, 3, 3)).astype(np.float32))
    b1 = b.constant("b1", weights.standard_normal(8).astype(np.float32))
    y = b.node("Conv", [x, w1, b1], pads=[1, 1, 1, 1], fused_activation="Relu")
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[1, 1])
    y = b.node("Conv", [y, w2], pads=[1, 1, 1, 1], outputs=["y"])
    b.output(y, np.float32, ["N", 8, 63, 63])
    return load(to_bytes(b.build()))


def test_pool_plans_after_one_run_and_results_do_not_change():
    engine = NumpyEngine(conv_chain_model())
    x = normal(1, 4, 64, 64)
    first = engine.run({"x": x})["y"]
    assert engine.pool.held_bytes() > 0
    state = engine.pool._state()
    results = [engine.run({"x": x})["y"] for _ in range(3)]
    # Every buffer is planned; the last Conv computes on a wide grid (lite.ops._wide_im2col) and
    # the caller gets a C-contiguous copy of its view, so even the output's buffer stays.
    assert not state.missed and len(state.from_arena) == len(state.sizes)
    for result in results:
        np.testing.assert_array_equal(result, first)


def test_outputs_the_caller_keeps_are_never_overwritten():
    engine = NumpyEngine(conv_chain_model())
    inputs = [normal(1, 4, 64, 64) for _ in range(3)]
    kept = [engine.run({"x": x})["y"] for x in inputs]
    fresh = NumpyEngine(conv_chain_model())
    for x, y in zip(inputs, kept):
        np.testing.assert_array_equal(y, fresh.run({"x": x})["y"])


def test_values_kept_by_an_observer_are_not_reused():
    engine = NumpyEngine(conv_chain_model())
    x1, x2 = normal(1, 4, 64, 64), normal(1, 4, 64, 64)
    engine.run({"x": x1})
    kept = {}

    def observe(node, seconds, values):
        kept[node.name] = [v for v in values if isinstance(v, np.ndarray) and v.nbytes > 65536]

    engine.run({"x": x1}, observe)
    snapshot = {name: [v.copy() for v in values] for name, values in kept.items()}
    engine.run({"x": x2})
    for name, values in kept.items():
        for value, copy in zip(values, snapshot[name]):
            np.testing.assert_array_equal(value, copy)


def test_a_new_input_shape_replans():
    engine = NumpyEngine(conv_chain_model())
    for shape in [(1, 4, 64, 64), (2, 4, 64, 64), (2, 4, 64, 64), (1, 4, 64, 64), (1, 4, 64, 64)]:
        x = normal(*shape)
        np.testing.assert_array_equal(engine.run({"x": x})["y"], NumpyEngine(conv_chain_model()).run({"x": x})["y"])
    assert not engine.pool._state().missed


def test_runs_that_ask_for_no_memory_between_planned_runs():
    """Small inputs ask the pool for nothing (every buffer under its floor), which skips the
    per-run bookkeeping; planned runs around them still give the same results, plan again, and
    never hand out bytes that values kept from an earlier run still use."""
    engine = NumpyEngine(conv_chain_model())
    fresh = NumpyEngine(conv_chain_model())
    kept = {}

    def observe(node, seconds, values):
        kept[node.name] = [v for v in values if isinstance(v, np.ndarray) and v.nbytes > 65536]

    for index, shape in enumerate([(1, 4, 8, 8), (1, 4, 8, 8), (1, 4, 64, 64), (1, 4, 8, 8), (1, 4, 64, 64),
                                   (1, 4, 64, 64), (1, 4, 8, 8), (1, 4, 8, 8), (1, 4, 64, 64), (1, 4, 64, 64)]):
        x = normal(*shape)
        observer = observe if index == 4 else None  # keeps planned buffers of a big run alive
        np.testing.assert_array_equal(engine.run({"x": x}, observer)["y"], fresh.run({"x": x})["y"])
        if index == 4:
            snapshot = {name: [v.copy() for v in values] for name, values in kept.items()}
    state = engine.pool._state()
    assert state.sizes and not state.missed  # the second big run in a row was served from a plan
    for name, values in kept.items():
        for value, copy in zip(values, snapshot[name]):
            np.testing.assert_array_equal(value, copy)


def test_threads_have_pools_of_their_own():
    model = lite.Model.load(to_bytes(conv_chain_model()), device="numpy")
    assert_same_across_threads(model, [normal(1, 4, 64, 64) for _ in range(8)])


def test_engine_calls_kernels_with_their_attributes_activation_and_prepared_weights():
    """The engine builds each node's keyword arguments once, at load: every run must still be the
    kernels called one by one (attributes, fused activation, prepared weights, output counts)."""
    model = conv_chain_model()
    engine = NumpyEngine(model)
    constants = {t.name: np.asarray(t.data) for t in model.main.tensors if t.is_constant}
    x = normal(1, 4, 64, 64)
    y = conv.Conv(x, constants["w1"], constants["b1"], pads=[1, 1, 1, 1], fused_activation=("Relu", ()))
    y = max_pool.MaxPool(y, kernel_shape=[2, 2], strides=[1, 1])
    expected = conv.Conv(y, constants["w2"], pads=[1, 1, 1, 1])
    for _ in range(2):
        np.testing.assert_allclose(engine.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-4)
    b = GraphBuilder("split", opset=13)
    source = b.input("x", np.float32, [6, 4])
    first, second = b.node("Split", [source], axis=0, outputs=["a", "b"])
    b.output(first, np.float32, [3, 4])
    b.output(second, np.float32, [3, 4])
    split = NumpyEngine(load(to_bytes(b.build())))
    z = normal(6, 4)
    for _ in range(2):
        outputs = split.run({"x": z})
        np.testing.assert_array_equal(outputs["a"], z[:3])
        np.testing.assert_array_equal(outputs["b"], z[3:])


def test_engine_run_loop_omitted_inputs_extra_kernel_outputs_and_named_failures():
    """The run loop's inline calls: an omitted optional input reads None, a kernel returning more
    outputs than its node declares gives the first, and a failing kernel is named with its inputs."""
    b = GraphBuilder("inline", opset=17)
    x = b.input("x", np.float32, [2, 8])
    scale = b.constant("scale", np.full(8, 2.0, np.float32))
    y = b.node("LayerNormalization", [x, scale], axis=-1)
    b.output(b.node("Clip", [y, "", b.constant("high", np.array(1.0, np.float32))], outputs=["y"]), np.float32, [2, 8])
    engine = NumpyEngine(load(to_bytes(b.build())))
    z = normal(2, 8)
    expected = np.minimum(2 * (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5), 1.0)
    np.testing.assert_allclose(engine.run({"x": z})["y"], expected, rtol=1e-5, atol=1e-5)

    b = GraphBuilder("failing", opset=13)
    x = b.input("x", np.float32, ["N", 3])
    b.output(b.node("MatMul", [x, b.constant("w", np.ones((3, 2), np.float32))], outputs=["y"]), np.float32, ["N", 2])
    engine = NumpyEngine(load(to_bytes(b.build())))
    with pytest.raises(lite.KernelError, match=r"\(MatMul\) failed on inputs \[float32\[2, 4\], float32\[3, 2\]\]"):
        engine.run({"x": normal(2, 4)})


def _linear_model(bias_first: bool, product_is_output: bool, second_reader: bool):
    weights = np.random.default_rng(3)
    b = GraphBuilder("linear", opset=14)
    x = b.input("x", np.float32, ["N", 5, 8])
    w = b.constant("w", weights.standard_normal((8, 6)).astype(np.float32))
    bias = b.constant("bias", weights.standard_normal(6).astype(np.float32))
    product = b.node("MatMul", [x, w], outputs=["product"] if product_is_output else 1)
    y = b.node("Add", [bias, product] if bias_first else [product, bias], outputs=["y"])
    b.output(y, np.float32, ["N", 5, 6])
    if product_is_output:
        b.output(product, np.float32, ["N", 5, 6])
    if second_reader:
        b.output(b.node("Relu", [product], outputs=["r"]), np.float32, ["N", 5, 6])
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("product_is_output, second_reader, fused",
                         [(False, False, True), (True, False, False), (False, True, False)])
def test_matmul_and_bias_add_run_as_one_step_only_when_nothing_else_reads_the_product(bias_first, product_is_output,
                                                                                     second_reader, fused):
    model = _linear_model(bias_first, product_is_output, second_reader)
    engine = NumpyEngine(model)
    op_types = [step.node.op_type for step in engine.plans[0].steps]
    assert ("Add" not in op_types) == fused
    constants = {t.name: np.asarray(t.data) for t in model.main.tensors if t.is_constant}
    for batch in (1, 3):
        x = normal(batch, 5, 8)
        outputs = engine.run({"x": x})
        product = np.matmul(x, constants["w"])
        np.testing.assert_allclose(outputs["y"], product + constants["bias"], rtol=1e-6, atol=1e-6)
        if product_is_output:
            np.testing.assert_allclose(outputs["product"], product, rtol=1e-6, atol=1e-6)
        if second_reader:
            np.testing.assert_allclose(outputs["r"], np.maximum(product, 0), rtol=1e-6, atol=1e-6)
