"""Conv on prepared weights: one layer per input shape, layout, dtype and activation, built on
the first call and reused after, on every path (pointwise channels-first and channels-last,
strided pointwise, depthwise channels-last and by taps, grouped, wide and plain im2col,
Winograd, narrow floats), each against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _conv_common, conv, fused_activation
from lite.ops._layout import is_channels_last
from tests.lite.ops._reference import channels_last, reference_outputs

rng = np.random.default_rng(53)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def expected_conv(x, w, b, attributes, activation):
    y = reference_outputs("Conv", [x, w, b], attributes, 11)[0]
    return y if activation is None else fused_activation.apply(y, *activation)


CASES = {
    "pointwise": ((2, 12, 9, 8), (20, 12, 1, 1), {}),
    "pointwise small image": ((1, 16, 4, 4), (24, 16, 1, 1), {}),
    "pointwise expansion": ((2, 8, 16, 16), (48, 8, 1, 1), {}),  # the bias added by the GEMM
    "pointwise strided": ((1, 12, 9, 8), (20, 12, 1, 1), {"strides": [2, 2]}),
    "pointwise grouped": ((1, 12, 6, 6), (8, 6, 1, 1), {"group": 2}),
    "depthwise": ((2, 16, 9, 10), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),
    "depthwise strided": ((1, 24, 11, 9), (24, 1, 5, 5), {"group": 24, "pads": [1, 1, 2, 2], "strides": [2, 2]}),
    "depthwise exact": ((1, 200, 4, 4), (200, 1, 3, 3), {"group": 200, "pads": [1, 1, 1, 1]}),
    "depthwise exact narrow": ((2, 96, 8, 7), (96, 1, 3, 3), {"group": 96, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    # Stride 1 across: the merged exact form (rows of out_w * C), in bands on a large image.
    "depthwise merged in bands": ((1, 64, 120, 64), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]}),
    "depthwise merged dilated": ((2, 8, 11, 9), (8, 1, 3, 5), {"group": 8, "pads": [2, 0, 1, 3], "dilations": [2, 1],
                                                                "strides": [2, 1]}),
    "depthwise multiplier": ((1, 6, 9, 9), (12, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    "grouped": ((1, 32, 8, 8), (32, 8, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3 strided": ((1, 3, 32, 32), (8, 3, 3, 3), {"pads": [0, 0, 1, 1], "strides": [2, 2]}),
    "3x3 small image": ((1, 32, 4, 4), (48, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3 dilated": ((2, 16, 9, 9), (8, 16, 3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 0], "strides": [1, 2]}),
    "patchify": ((1, 3, 16, 16), (24, 3, 4, 4), {"strides": [4, 4]}),
    "winograd": ((1, 128, 14, 14), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
    # Channels-first images of 16x16 planes with 48 channels and of 32x32 planes: transposed through
    # pitched planes (lite.ops._conv_common.PlanesToRows) into the channels-last buffers.
    "depthwise 16x16 planes": ((2, 48, 16, 16), (48, 1, 3, 3), {"group": 48, "pads": [1, 1, 1, 1]}),
    "depthwise 32x32 planes": ((2, 24, 32, 32), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1]}),
    "depthwise 32x32 planes in bands": ((1, 48, 32, 32), (48, 1, 3, 3),
                                        {"group": 48, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3 16x16 planes": ((2, 48, 16, 16), (16, 48, 3, 3), {"pads": [1, 1, 1, 1]}),  # stride 1: the phase grid
    "3x3 16x16 planes strided": ((2, 48, 16, 16), (16, 48, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    # An 8x8 output of 40 channels: the channels-last im2col's GEMM as columns @ W^T, transposed after.
    "3x3 transposed product": ((2, 32, 8, 8), (40, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    # A 2x2 output of a large product: blocks of output channels, each below OpenBLAS's packing.
    "3x3 2x2 output in blocks": ((1, 160, 2, 2), (200, 160, 3, 3), {"pads": [1, 1, 1, 1]}),
    "1-D": ((2, 6, 17), (8, 6, 3), {"pads": [1, 1]}),
    "1-D strided": ((1, 1, 400), (8, 1, 10), {"strides": [5]}),
    "1-D grouped": ((1, 16, 12), (16, 4, 16), {"group": 4, "pads": [8, 8]}),
    "3-D": ((1, 4, 5, 6, 7), (4, 2, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 0, 1, 1]}),
}
ACTIVATIONS = [None, ("Relu", ()), ("Clip", (0.0, 6.0)), ("HardSwish", ())]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=["none", "Relu", "Clip", "HardSwish"])
def test_prepared_layers_match_the_reference_and_are_reused(case, activation):
    x_shape, w_shape, attributes = CASES[case]
    w, b = normal(*w_shape), normal(w_shape[0])
    prepared = conv.prepare_conv([None, w, b], [x_shape, w.shape, b.shape], **attributes)
    layouts = [np.asarray] + ([channels_last] if len(x_shape) == 4 else [])
    for layout in layouts:
        for _ in range(2):  # the second call reuses the layer (and its scratch) on new data
            x = normal(*x_shape)
            got = conv.Conv(layout(x), w, b, fused_activation=activation, prepared=prepared, **attributes)
            np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, activation), rtol=1e-4, atol=1e-4)
    # One layer per layout, built once.
    assert len(prepared.layers) == len(layouts)


def test_a_layer_per_input_shape_and_activation():
    w, b = normal(8, 4, 3, 3), normal(8)
    attributes = {"pads": [1, 1, 1, 1]}
    prepared = conv.prepare_conv([None, w, b], [None, w.shape, b.shape], **attributes)
    for shape in [(1, 4, 6, 6), (2, 4, 6, 6), (1, 4, 9, 5)]:
        for activation in [None, ("Relu", ())]:
            x = normal(*shape)
            got = conv.Conv(x, w, b, fused_activation=activation, prepared=prepared, **attributes)
            np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, activation), rtol=1e-4, atol=1e-4)
    assert len(prepared.layers) == 6


def test_layers_are_bounded():
    w = normal(4, 2, 1, 1)
    prepared = conv.prepare_conv([None, w], [None, w.shape])
    for size in range(1, 2 * conv._LAYERS + 1):
        x = normal(1, 2, size, 3)
        np.testing.assert_allclose(conv.Conv(x, w, prepared=prepared), reference_outputs("Conv", [x, w], {}, 11)[0],
                                   rtol=1e-5, atol=1e-5)
    assert len(prepared.layers) <= conv._LAYERS


def test_a_bias_computed_at_run_time_is_read_on_every_call():
    w = normal(6, 3, 3, 3)
    attributes = {"pads": [1, 1, 1, 1]}
    prepared = conv.prepare_conv([None, w, None], [(1, 3, 8, 8), w.shape, (6,)], **attributes)
    assert prepared is not None and not prepared.bias_known
    x = normal(1, 3, 8, 8)
    for _ in range(2):
        b = normal(6)
        got = conv.Conv(x, w, b, prepared=prepared, **attributes)
        np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, None), rtol=1e-4, atol=1e-4)
    assert not prepared.layers


@pytest.mark.parametrize("activation", [None, ("Relu", ())], ids=["none", "Relu"])
def test_float16_inputs_compute_in_float32_and_activate_after_the_cast(activation):
    x, w, b = normal(1, 8, 6, 6).astype(np.float16), normal(8, 1, 3, 3), normal(8)
    attributes = {"group": 8, "pads": [1, 1, 1, 1]}
    prepared = conv.prepare_conv([None, w, b], [x.shape, w.shape, b.shape], **attributes)
    got = conv.Conv(x, w, b, fused_activation=activation, prepared=prepared, **attributes)
    assert got.dtype == np.float16
    expected = expected_conv(x.astype(np.float32), w, b, attributes, activation)
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-3, atol=2e-3)


def test_pointwise_layer_keeps_the_layout_policy():
    """Channels-last in, channels-last out from _CHANNELS_LAST_MIN_PIXELS pixels on."""
    w, b = normal(16, 8, 1, 1), normal(16)
    prepared = conv.prepare_conv([None, w, b], [None, w.shape, b.shape])
    for size, stays in [(8, True), (4, False)]:
        x = channels_last(normal(1, 8, size, size))
        got = conv.Conv(x, w, b, prepared=prepared)
        assert is_channels_last(got) == stays
        np.testing.assert_allclose(got, expected_conv(np.ascontiguousarray(x), w, b, {}, None), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["pointwise", "pointwise expansion", "3x3 small image", "3x3 strided", "3x3 dilated",
                                  "3x3 transposed product"])
def test_products_split_between_threads_give_the_same_values(monkeypatch, case):
    """On a busy machine the engine splits large products itself (lite.ops._parallel)."""
    from lite.ops import _parallel as parallel
    from lite.ops._blas import ONE_BLAS_THREAD

    monkeypatch.setattr(parallel, "threads", lambda: 2)
    monkeypatch.setattr(parallel, "_BLOCK_MULTIPLY_ADDS", 1)
    monkeypatch.setattr(parallel, "SPLIT_MULTIPLY_ADDS", 0)
    monkeypatch.setattr(ONE_BLAS_THREAD, "split", True)
    x_shape, w_shape, attributes = CASES[case]
    x, w, b = normal(*x_shape), normal(*w_shape), normal(w_shape[0])
    prepared = conv.prepare_conv([None, w, b], [x.shape, w.shape, b.shape], **attributes)
    got = conv.Conv(x, w, b, fused_activation=("Relu", ()), prepared=prepared, **attributes)
    np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, ("Relu", ())), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation", [None, ("Relu", ())], ids=["none", "Relu"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
def test_im2col_transposed_product_matches_the_reference(activation, with_bias):
    from lite.ops._conv_gemm import Im2col

    x, w = normal(2, 32, 8, 8), normal(48, 32, 3, 3)
    b = normal(48) if with_bias else None
    layer = Im2col(x, w, b, activation, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [8, 8], 1)
    assert layer.transposed
    # Only small outputs of enough channels take it.
    assert not Im2col(normal(1, 32, 4, 4), w, b, activation, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [4, 4], 1).transposed
    assert not Im2col(x, w[:16], None if b is None else b[:16], activation, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1],
                      [8, 8], 1).transposed
    attributes = {"pads": [1, 1, 1, 1]}
    reference = expected_conv(x, w, np.zeros(48, np.float32) if b is None else b, attributes, activation)
    np.testing.assert_allclose(layer(x, np.empty), reference, rtol=1e-4, atol=1e-4)


def test_im2col_products_of_a_2x2_output_in_blocks():
    from lite.ops._conv_gemm import Im2col

    x, w, b = normal(1, 160, 2, 2), normal(200, 160, 3, 3), normal(200)
    layer = Im2col(x, w, b, ("Relu", ()), [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [2, 2], 1)
    assert layer.block == 160  # 1,000,000 // (1441 * 4) = 173, in 16s: 160 and 40 of the 200 channels
    # Small products stay one.
    assert Im2col(x[:, :32], w[:, :32], b, None, [3, 3], [1, 1], [1, 1], [1, 1], [1, 1], [2, 2], 1).block is None
    np.testing.assert_allclose(layer(x, np.empty), expected_conv(x, w, b, {"pads": [1, 1, 1, 1]}, ("Relu", ())),
                               rtol=1e-4, atol=1e-4)


def test_planes_to_rows_is_the_transpose():
    x = normal(48, 16, 32)
    to_rows = _conv_common.PlanesToRows(48, 16, 32)
    rows = np.empty((16, 32, 48), np.float32)
    to_rows(x, rows, to_rows.buffer(np.float32))
    np.testing.assert_array_equal(rows, x.transpose(1, 2, 0))
    assert _conv_common.transposes_through_pitch(48, 16, 32, 4)
    assert not _conv_common.transposes_through_pitch(48, 7, 7, 4) and not _conv_common.transposes_through_pitch(8, 16, 16, 4)
    assert _conv_common.transposes_through_pitch(16, 32, 32, 4) and not _conv_common.transposes_through_pitch(32, 16, 16, 4)


def test_the_pitched_transpose_is_used_where_it_applies():
    from lite.ops import _depthwise

    layer = _depthwise.depthwise_layer((1, 24, 32, 32), normal(24, 1, 3, 3), None, None, [1, 1], [1, 1], [1, 1],
                                       [1, 1], [32, 32], np.float32)
    assert layer.keeps_scratch
    layer(normal(1, 24, 32, 32), np.empty)
    scratch = layer.geometry.scratch(np.dtype(np.float32))
    assert scratch.to_rows is not None
    # Stride 1: the image is transposed straight into the phase buffer, no copy after.
    assert not scratch.fills and scratch.rows.base is scratch.buffers


def test_depthwise_layers_of_one_shape_share_their_scratch():
    """Layers of one geometry keep one scratch per thread (zeroed once, only image cells ever
    written): each still computes its own convolution, on every call."""
    from lite.ops import _depthwise

    attributes = ([1, 1], [1, 1], [1, 1], [1, 1], [8, 8])
    cases = [(normal(32, 1, 3, 3), normal(32), ("Clip", (0.0, 6.0))), (normal(32, 1, 3, 3), None, None),
             (normal(32, 1, 3, 3), normal(32), ("Relu", ()))]
    layers = [_depthwise.depthwise_layer((2, 32, 8, 8), w, b, act, *attributes, np.float32) for w, b, act in cases]
    assert all(layer.keeps_scratch and layer.geometry is layers[0].geometry for layer in layers)
    for _ in range(2):
        for layer, (w, b, act) in zip(layers, cases):
            x = normal(2, 32, 8, 8)
            expected = expected_conv(x, w, b, {"group": 32, "pads": [1, 1, 1, 1]}, act)
            np.testing.assert_allclose(layer(x, np.empty), expected, rtol=1e-5, atol=1e-5)
    assert layers[0].geometry.scratch(np.dtype(np.float32)) is layers[0].geometry._local.scratch


def test_a_one_band_depthwise_layer_of_a_larger_map_keeps_its_scratch():
    """A 32x32 stride-2 layer of 48 channels (two column phases, about 320 KiB of scratch) is
    kept: its buffers are not zeroed again on every call."""
    from lite.ops import _depthwise

    w, b = normal(48, 1, 3, 3), normal(48)
    layer = _depthwise.depthwise_layer((1, 48, 32, 32), w, b, ("Clip", (0.0, 6.0)), [1, 1], [1, 1], [2, 2], [1, 1],
                                       [16, 16], np.float32)
    assert layer.keeps_scratch and len(layer.geometry.phases) == 2
    for _ in range(2):
        x = channels_last(normal(1, 48, 32, 32))
        expected = expected_conv(x, w, b, {"group": 48, "pads": [1, 1, 1, 1], "strides": [2, 2]}, ("Clip", (0.0, 6.0)))
        np.testing.assert_allclose(layer(x, np.empty), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("channels", "size", "strides", "exact"), [(200, 8, 1, True), (96, 4, 1, True), (96, 8, 2, True),
                                                                   (96, 8, 1, True), (32, 4, 1, True), (96, 16, 2, False),
                                                                   (32, 8, 2, False), (200, 16, 2, True)])
def test_depthwise_form_by_channels_and_output_width(channels, size, strides, exact):
    """The exact form at stride 1 (merged: rows of out_w * C), for many channels, or from 64
    channels on outputs at most 4 wide; the wide form otherwise."""
    from lite.ops import _depthwise

    out = (size - 1) // strides + 1
    layer = _depthwise.depthwise_layer((1, channels, size, size), normal(channels, 1, 3, 3), None, None, [1, 1], [1, 1],
                                       [strides] * 2, [1, 1], [out, out], np.float32)
    assert layer.geometry.exact == exact
    assert layer.geometry.merged == (strides == 1)
