"""im2col on the stride-phase grid (lite.ops._phase_grid): the layer against onnx.reference on
grouped, strided, dilated and asymmetrically padded convolutions, and where Conv takes it."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _phase_grid, conv, fused_activation
from lite.ops._conv_common import output_shape, resolve_pads
from tests.lite.ops._reference import channels_last, reference_outputs

rng = np.random.default_rng(71)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def expected(x, w, b, attributes, activation):
    inputs = [x, w] if b is None else [x, w, b]
    y = reference_outputs("Conv", inputs, attributes, 11)[0]
    return y if activation is None else fused_activation.apply(y, *activation)


def geometry(x_shape, w_shape, attributes):
    kernel = list(w_shape[2:])
    strides = attributes.get("strides", [1, 1])
    dilations = attributes.get("dilations", [1, 1])
    begin, end = resolve_pads("Conv", "NOTSET", attributes.get("pads", [0, 0, 0, 0]), x_shape[2:], kernel, strides,
                              dilations)
    return kernel, begin, end, strides, dilations, output_shape(x_shape[2:], kernel, strides, dilations, begin, end)


CASES = {
    "grouped": ((1, 32, 16, 16), (32, 4, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    "grouped small map": ((1, 64, 4, 4), (64, 8, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    "grouped strided": ((2, 64, 16, 16), (64, 2, 3, 3), {"group": 32, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "grouped odd": ((1, 12, 9, 11), (18, 4, 3, 5), {"group": 3, "pads": [2, 0, 1, 3], "strides": [2, 3]}),
    "grouped dilated": ((1, 16, 13, 10), (8, 8, 3, 3), {"group": 2, "pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "mixed dilation and stride": ((2, 6, 15, 14), (6, 3, 3, 3), {"group": 2, "dilations": [2, 3],
                                                                  "strides": [3, 2], "pads": [1, 2, 0, 1]}),
    "one group": ((1, 3, 20, 20), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    "one group, stride 1": ((2, 16, 16, 16), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "no padding": ((1, 8, 7, 7), (4, 4, 2, 2), {"group": 2}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("activation", [None, ("Relu", ()), ("HardSwish", ())], ids=["none", "Relu", "HardSwish"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
def test_layer_matches_the_reference(case, activation, with_bias):
    x_shape, w_shape, attributes = CASES[case]
    w = normal(*w_shape)
    b = normal(w_shape[0]) if with_bias else None
    group = attributes.get("group", 1)
    kernel, begin, end, strides, dilations, out_shape = geometry(x_shape, w_shape, attributes)
    x = normal(*x_shape)
    layer = _phase_grid.PhaseGrid(x, w, b, activation, kernel, begin, end, strides, dilations, out_shape, group)
    for _ in range(2):  # the second call reuses the kept scratch on new data
        x = normal(*x_shape)
        got = layer(x, np.empty)
        assert got.shape == (x_shape[0], w_shape[0], *out_shape) and got.flags.c_contiguous
        np.testing.assert_allclose(got, expected(x, w, b, attributes, activation), rtol=1e-4, atol=1e-4)


def test_non_contiguous_input_and_scratch_from_the_arena():
    x_shape, w_shape, attributes = CASES["grouped"]
    w, b = normal(*w_shape), normal(w_shape[0])
    kernel, begin, end, strides, dilations, out_shape = geometry(x_shape, w_shape, attributes)
    wide = normal(1, 32, 16, 20)
    x = wide[:, :, :, 2:18]  # every row strided
    layer = _phase_grid.PhaseGrid(x, w, b, None, kernel, begin, end, strides, dilations, out_shape, 8)
    layer.keeps_scratch = False  # the buffers asked of ``allocate``, filled on every call

    def garbage(shape, dtype):
        return np.full(shape, np.nan, dtype)

    np.testing.assert_allclose(layer(x, garbage), expected(x, w, b, attributes, None), rtol=1e-4, atol=1e-4)


def test_conv_takes_the_path_for_grouped_layers_and_matches_the_general_one():
    x_shape, w_shape, attributes = (1, 128, 16, 16), (128, 4, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}
    w, b = normal(*w_shape), normal(w_shape[0])
    prepared = conv.prepare_conv([None, w, b], [x_shape, w.shape, b.shape], **attributes)
    x = normal(*x_shape)
    got = conv.Conv(x, w, b, fused_activation=("Relu", ()), prepared=prepared, **attributes)
    assert any(isinstance(layer, _phase_grid.PhaseGrid) for layer in prepared.layers.values())
    # The same convolution on the block path (no prepared layers: a channels-last input).
    general = conv.Conv(channels_last(x), w, b, fused_activation=("Relu", ()), **attributes)
    np.testing.assert_allclose(got, general, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, expected(x, w, b, attributes, ("Relu", ())), rtol=1e-4, atol=1e-4)


def test_conv_takes_the_path_for_one_group_on_a_16x16_map():
    x_shape, w_shape, attributes = (1, 64, 16, 16), (16, 64, 3, 3), {"pads": [1, 1, 1, 1]}
    w, b = normal(*w_shape), normal(w_shape[0])
    prepared = conv.prepare_conv([None, w, b], [x_shape, w.shape, b.shape], **attributes)
    x = normal(*x_shape)
    got = conv.Conv(x, w, b, fused_activation=("Relu", ()), prepared=prepared, **attributes)
    assert any(isinstance(layer, _phase_grid.PhaseGrid) for layer in prepared.layers.values())
    np.testing.assert_allclose(got, expected(x, w, b, attributes, ("Relu", ())), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("x_shape", "w_shape", "attributes", "reason"), [
    ((1, 32, 16, 16), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, None),
    ((1, 32, 8, 8), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "one group, a quarter of the columns wasted"),
    ((1, 32, 16, 16), (32, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "one group, strided"),
    ((1, 3, 64, 64), (32, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, "one group, strided stem"),
    ((1, 64, 32, 32), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, "one group, columns beyond Im2col's"),
    ((1, 32, 16, 16), (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}, "depthwise"),
    ((1, 32, 16, 16), (32, 8, 1, 1), {"group": 4}, "pointwise"),
    ((1, 32, 16, 16), (32, 8, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}, "few strided rows"),
    ((1, 64, 2, 2), (64, 8, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, "mostly wasted columns"),
    ((1, 64, 4, 4), (64, 8, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, "a third of the columns wasted"),
    ((1, 64, 8, 8), (64, 8, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, None),
    ((1, 8, 64, 64), (8, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, None),
])
def test_suits(x_shape, w_shape, attributes, reason):
    kernel, begin, end, strides, _, out_shape = geometry(x_shape, w_shape, attributes)
    x, w = normal(*x_shape), normal(*w_shape)
    group = attributes.get("group", 1)
    assert _phase_grid.suits(x, w, group, kernel, begin, end, strides, out_shape) is (reason is None)
    # A channels-last input never takes it.
    assert not _phase_grid.suits(channels_last(x), w, group, kernel, begin, end, strides, out_shape)
