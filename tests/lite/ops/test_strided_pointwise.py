"""Strided 1x1 convolutions of channels-first inputs (lite.ops._conv_gemm.StridedPointwise): the
sampled pixels and one GEMM, against onnx.reference; and the inputs it leaves to other paths."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _conv_gemm, conv, fused_activation
from tests.lite.ops._reference import channels_last, reference_outputs

rng = np.random.default_rng(29)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def expected(x, w, b, attributes, activation):
    y = reference_outputs("Conv", [x, w] if b is None else [x, w, b], attributes, 11)[0]
    return y if activation is None else fused_activation.apply(y, *activation)


CASES = {
    "shortcut": ((1, 64, 16, 16), (128, 64, 1, 1), {"strides": [2, 2]}),
    "odd map, batch": ((2, 12, 9, 7), (20, 12, 1, 1), {"strides": [2, 2]}),
    "uneven strides": ((1, 8, 10, 9), (6, 8, 1, 1), {"strides": [3, 1]}),
    "1-D": ((2, 6, 17), (8, 6, 1), {"strides": [4]}),
    "3-D": ((1, 4, 5, 6, 7), (3, 4, 1, 1, 1), {"strides": [2, 1, 3]}),
}


def layers_of(prepared):
    return list(prepared.layers.values())


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("activation", [None, ("Relu", ()), ("HardSwish", ())], ids=["none", "Relu", "HardSwish"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
def test_matches_the_reference(case, activation, with_bias):
    x_shape, w_shape, attributes = CASES[case]
    w = normal(*w_shape)
    b = normal(w_shape[0]) if with_bias else None
    constants = [None, w] if b is None else [None, w, b]
    prepared = conv.prepare_conv(constants, [x_shape, w.shape], **attributes)
    for _ in range(2):
        x = normal(*x_shape)
        got = conv.Conv(x, w, b, fused_activation=activation, prepared=prepared, **attributes)
        np.testing.assert_allclose(got, expected(x, w, b, attributes, activation), rtol=1e-4, atol=1e-4)
    assert isinstance(layers_of(prepared)[0], _conv_gemm.StridedPointwise)


def test_a_non_contiguous_input():
    x_shape, w_shape, attributes = CASES["odd map, batch"]
    w, b = normal(*w_shape), normal(w_shape[0])
    x = normal(2, 24, 9, 7)[:, ::2]
    np.testing.assert_allclose(conv.Conv(x, w, b, **attributes), expected(x, w, b, attributes, None),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("attributes", "layout"), [
    ({"strides": [2, 2]}, "channels last"),  # the channels-last im2col matrix needs no transpose
    ({"strides": [2, 2], "pads": [1, 1, 0, 0]}, "channels first"),
    ({"strides": [1, 1]}, "channels first"),  # plain: Pointwise
    ({"strides": [2, 2], "group": 2}, "channels first"),
])
def test_other_inputs_take_other_paths(attributes, layout):
    w_shape = (8, 16 // attributes.get("group", 1), 1, 1)
    w, b = normal(*w_shape), normal(8)
    x = normal(1, 16, 8, 8)
    prepared = conv.prepare_conv([None, w, b], [x.shape, w.shape, b.shape], **attributes)
    feed = channels_last(x) if layout == "channels last" else x
    got = conv.Conv(feed, w, b, prepared=prepared, **attributes)
    np.testing.assert_allclose(got, expected(x, w, b, attributes, None), rtol=1e-4, atol=1e-4)
    assert not isinstance(layers_of(prepared)[0], _conv_gemm.StridedPointwise)
