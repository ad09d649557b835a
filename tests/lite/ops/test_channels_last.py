"""Channels-last activations (lite.ops._layout): the depthwise convolution computes and returns them,
pointwise convolutions and elementwise binary ops keep them, everything matches onnx.reference,
and the numpy engine hands its caller ordinary C-contiguous arrays."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from lite.ops import _conv_gemm, _depthwise, arithmetic, conv, fused_activation
from lite.ops._layout import is_channels_last
from tests.lite.ops._reference import channels_last, reference_outputs

rng = np.random.default_rng(77)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# (channels, H, W, kernel, strides, dilations, pads): small channel counts take the wide form,
# 192 and more the exact form.
DEPTHWISE = [
    (8, 9, 10, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (8, 9, 10, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (5, 11, 7, (3, 2), (2, 3), (1, 2), (0, 2, 1, 0)),
    (6, 7, 7, (5, 5), (1, 1), (2, 1), (2, 2, 2, 2)),
    (4, 3, 4, (3, 3), (3, 1), (1, 1), (2, 0, 0, 2)),
    (192, 9, 10, (3, 3), (2, 2), (1, 1), (1, 0, 2, 1)),
    (256, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (200, 8, 9, (3, 2), (1, 2), (2, 1), (2, 1, 0, 1)),
]


@pytest.mark.parametrize("channels, height, width, kernel, strides, dilations, pads", DEPTHWISE)
@pytest.mark.parametrize("layout", ["channels-first", "channels-last"])
@pytest.mark.parametrize("budget", [600, _depthwise._DEPTHWISE_SCRATCH_ELEMENTS], ids=["bands", "whole"])
def test_depthwise_matches_the_reference_and_returns_channels_last(
    monkeypatch, channels, height, width, kernel, strides, dilations, pads, layout, budget
):
    monkeypatch.setattr(_depthwise, "_DEPTHWISE_SCRATCH_ELEMENTS", budget)
    x, w, b = normal(2, channels, height, width), normal(channels, 1, *kernel), normal(channels)
    attributes = {"group": channels, "strides": list(strides), "dilations": list(dilations), "pads": list(pads)}
    expected = fused_activation.apply(reference_outputs("Conv", [x, w, b], attributes, 11)[0], "Clip", (0.0, 1.0))
    given = channels_last(x) if layout == "channels-last" else x
    got = conv.Conv(given, w, b, fused_activation=("Clip", (0.0, 1.0)), **attributes)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert is_channels_last(got)


@pytest.mark.parametrize("strides, pads", [((1, 1), (0, 0, 0, 0)), ((2, 2), (0, 0, 0, 0)), ((1, 1), (1, 0, 0, 1))])
@pytest.mark.parametrize("size", [(9, 8), (6, 5)], ids=["72 pixels", "30 pixels"])
def test_pointwise_keeps_a_channels_last_input_channels_last(strides, pads, size):
    x, w, b = normal(2, 12, *size), normal(20, 12, 1, 1), normal(20)
    attributes = {"strides": list(strides), "pads": list(pads)}
    expected = np.maximum(reference_outputs("Conv", [x, w, b], attributes, 11)[0], 0)
    got = conv.Conv(channels_last(x), w, b, fused_activation=("Relu", ()), **attributes)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # One GEMM over rows of pixels: the plain case on all but small images stays channels-last.
    plain = strides == (1, 1) and not any(pads)
    assert is_channels_last(got) == (plain and size[0] * size[1] >= _conv_gemm._CHANNELS_LAST_MIN_PIXELS)
    assert not is_channels_last(conv.Conv(x, w, b, **attributes))


def test_add_writes_channels_last_when_its_full_sized_operands_are():
    a, b, bias = normal(1, 6, 5, 4), normal(1, 6, 5, 4), normal(1, 6, 1, 1)
    for first, second, expected_layout in [
        (channels_last(a), channels_last(b), True),
        (channels_last(a), bias, True),
        (channels_last(a), b, False),
        (a, b, False),
    ]:
        got = arithmetic.Add(first, second, allocate=lambda shape, dtype: np.empty(shape, dtype))
        np.testing.assert_array_equal(got, np.asarray(first) + np.asarray(second))
        assert is_channels_last(got) == expected_layout


def test_layout_predicate():
    x = normal(1, 3, 4, 5)
    assert not is_channels_last(x)
    assert is_channels_last(channels_last(x))
    assert not is_channels_last(channels_last(normal(1, 3, 1, 1)))  # both layouts at once: channels-first
    assert not is_channels_last(normal(3, 4))


def test_engine_hands_back_contiguous_arrays():
    """An inverted-residual block (pointwise -> depthwise -> pointwise + Add): channels-last inside,
    an ordinary array outside, equal to running the kernels on channels-first arrays."""
    weights = np.random.default_rng(5)
    b = GraphBuilder("block", opset=13)
    x = b.input("x", np.float32, ["N", 8, 20, 20])
    expand = b.constant("expand", weights.standard_normal((48, 8, 1, 1)).astype(np.float32))
    depthwise = b.constant("depthwise", weights.standard_normal((48, 1, 3, 3)).astype(np.float32))
    project = b.constant("project", weights.standard_normal((8, 48, 1, 1)).astype(np.float32))
    h = b.node("Conv", [x, expand], fused_activation="Clip", fused_activation_params=[0.0, 6.0])
    h = b.node("Conv", [h, depthwise], group=48, pads=[1, 1, 1, 1], fused_activation="Relu")
    h = b.node("Conv", [h, project])
    b.output(b.node("Add", [h, x], outputs=["y"]), np.float32, ["N", 8, 20, 20])
    engine = NumpyEngine(load(to_bytes(b.build())))
    value = normal(2, 8, 20, 20)
    for _ in range(3):  # the first run plans the arena, the next ones use it
        y = engine.run({"x": value})["y"]
        assert y.flags.c_contiguous
    h = conv.Conv(value, weights_of(engine, "expand"), fused_activation=("Clip", (0.0, 6.0)))
    h = np.ascontiguousarray(conv.Conv(h, weights_of(engine, "depthwise"), group=48, pads=[1, 1, 1, 1],
                                       fused_activation=("Relu", ())))
    expected = conv.Conv(h, weights_of(engine, "project")) + value
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def weights_of(engine: NumpyEngine, name: str) -> np.ndarray:
    plan = engine.plans[0]
    return plan.constants[plan.index_of[name]]
