"""Depthwise convolutions on small maps (lite.ops._depthwise_small): the dense weighted sum and
the two batched products against onnx.reference, for channels-first and channels-last inputs,
with and without a bias and a fused activation, and which shapes take which form."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _depthwise_small, conv, fused_activation
from lite.ops._layout import is_channels_last
from tests.lite.ops._reference import reference_outputs

rng = np.random.default_rng(37)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# (channels, height, width, kernel, pads, strides, dilations, form)
CASES = [
    (24, 16, 16, 7, [3, 3, 3, 3], [1, 1], [1, 1], _depthwise_small.DepthwiseProducts),  # ConvNeXt's first stage
    (48, 8, 8, 7, [3, 3, 3, 3], [1, 1], [1, 1], _depthwise_small.DepthwiseProducts),
    (8, 10, 12, 7, [2, 3, 1, 4], [1, 1], [1, 1], _depthwise_small.DepthwiseProducts),  # uneven padding
    (6, 12, 12, 7, [0, 0, 0, 0], [1, 1], [1, 1], _depthwise_small.DepthwiseProducts),  # no padding
    (96, 4, 4, 7, [3, 3, 3, 3], [1, 1], [1, 1], _depthwise_small.DepthwiseDense),
    (192, 2, 2, 7, [3, 3, 3, 3], [1, 1], [1, 1], _depthwise_small.DepthwiseDense),
    (16, 2, 3, 5, [2, 1, 1, 2], [2, 1], [1, 1], _depthwise_small.DepthwiseDense),  # strided
    (8, 2, 2, 5, [4, 3, 4, 4], [1, 1], [2, 2], _depthwise_small.DepthwiseDense),  # dilated
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}x{case[1]}x{case[2]}k{case[3]}")
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("activation", [None, ("Relu", ())])
def test_small_map_forms_match_the_reference(case, channels_last, activation):
    channels, height, width, kernel, pads, strides, dilations, form = case
    x, w, b = normal(2, channels, height, width), normal(channels, 1, kernel, kernel), normal(channels)
    attributes = dict(group=channels, kernel_shape=[kernel, kernel], pads=pads, strides=strides, dilations=dilations)
    out_shape = reference_outputs("Conv", [x, w, b], attributes, 11)[0].shape[2:]
    layer = _depthwise_small.small_map_layer(x.shape, w, b, activation, pads[:2], pads[2:], strides, dilations,
                                             out_shape, np.float32)
    assert type(layer) is form
    if channels_last:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for bias in (b, None):
        inputs = [x, w] if bias is None else [x, w, bias]
        expected = reference_outputs("Conv", [np.ascontiguousarray(x), *inputs[1:]], attributes, 11)[0]
        if activation is not None:
            expected = fused_activation.apply(expected, *activation)
        y = conv.Conv(*inputs, **attributes, fused_activation=activation)
        assert is_channels_last(y)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("height", "kernel", "strides", "form"), [
    (2, 3, [1, 1], None),  # 9 taps over 4 cells: the padded path
    (4, 3, [1, 1], None),
    (16, 3, [1, 1], None),  # narrow kernels: too many products per tap
    (32, 7, [1, 1], None),  # a map much wider than the kernel
    (16, 7, [2, 2], None),  # strided: no banded products
    (8, 5, [1, 1], None),  # too little work per channel for two BLAS calls
    (4, 7, [1, 1], _depthwise_small.DepthwiseDense),
    (8, 7, [1, 1], _depthwise_small.DepthwiseProducts),
])
def test_forms_are_picked_by_shape(height, kernel, strides, form):
    pad = kernel // 2
    out = (height + 2 * pad - kernel) // strides[0] + 1
    layer = _depthwise_small.small_map_layer((1, 16, height, height), np.zeros((16, 1, kernel, kernel), np.float32),
                                             None, None, [pad, pad], [pad, pad], strides, [1, 1], (out, out), np.float32)
    assert (None if layer is None else type(layer)) is form


def test_dense_weights_are_bounded():
    """Many channels on a 4x4 map: the dense weights would pass _DENSE_BYTES (16 x 16 x 768 x 4)."""
    layer = _depthwise_small.small_map_layer((1, 768, 4, 4), np.zeros((768, 1, 7, 7), np.float32), None, None,
                                             [3, 3], [3, 3], [1, 1], [1, 1], (4, 4), np.float32)
    assert not isinstance(layer, _depthwise_small.DepthwiseDense)
