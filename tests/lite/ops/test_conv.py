"""Conv, ConvTranspose, ConvInteger, QLinearConv against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_onnxruntime, check_against_reference, kernel_outputs

rng = np.random.default_rng(1234)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


CONV_CASES = [
    ((1, 3, 8, 8), (4, 3, 3, 3), {}),
    ((2, 4, 9, 10), (6, 4, 3, 2), {"strides": [2, 2], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((2, 4, 9, 10), (6, 2, 3, 2), {"group": 2, "strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((2, 4, 9, 10), (8, 1, 3, 3), {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 4, 9, 10), (4, 1, 3, 3), {"group": 4, "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 6, 7, 7), (6, 1, 5, 5), {"group": 6, "pads": [2, 2, 2, 2], "dilations": [2, 1]}),
    ((1, 4, 9, 10), (5, 4, 3, 3), {"auto_pad": "VALID", "strides": [3, 2]}),
    ((1, 4, 9), (3, 4, 1), {"strides": [2]}),
    ((2, 4, 11), (4, 2, 3), {"group": 2, "pads": [1, 2], "dilations": [3]}),
    ((1, 2, 5, 4, 3), (3, 2, 2, 2, 2), {"pads": [1, 1, 1, 0, 0, 0]}),
    ((1, 4, 5, 4, 6), (4, 1, 3, 3, 3), {"group": 4, "strides": [1, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    ((2, 4, 9, 10), (6, 2, 1, 1), {"group": 2, "strides": [2, 2]}),
    ((1, 8, 6, 6), (16, 8, 1, 1), {}),
    # many channels: the channels-last depthwise path
    ((2, 192, 9, 10), (192, 1, 3, 3), {"group": 192, "strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 256, 7, 7), (256, 1, 5, 5), {"group": 256, "auto_pad": "SAME_UPPER"}),
    ((1, 4, 7, 7), (12, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ((1, 8, 6, 6), (16, 8, 1, 1), {"pads": [1, 0, 0, 1]}),
]


@pytest.mark.parametrize("x_shape, w_shape, attributes", CONV_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv(x_shape, w_shape, attributes, with_bias):
    bias = normal(w_shape[0]) if with_bias else None
    check_against_reference("Conv", [normal(*x_shape), normal(*w_shape), bias], attributes, opset=11)


def test_conv_float16_keeps_dtype():
    x, w = normal(1, 3, 6, 6, dtype=np.float16), normal(2, 3, 3, 3, dtype=np.float16)
    check_against_reference("Conv", [x, w], {"pads": [1, 1, 1, 1]}, opset=11, rtol=1e-2, atol=1e-2)


def test_conv_does_not_write_into_inputs():
    x, w = normal(1, 4, 6, 6), normal(4, 1, 3, 3)
    x.flags.writeable = False
    w.flags.writeable = False
    kernel_outputs("Conv", [x, w, None], {"group": 4}, opset=11)


CONV_TRANSPOSE_CASES = [
    ((1, 3, 4, 4), (3, 2, 3, 3), {}),
    ((2, 4, 3, 5), (4, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 1, 1]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"dilations": [2, 2], "strides": [2, 1]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 2, 5), (2, 3, 3), {"strides": [2], "pads": [1, 2]}),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 2), {"strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("x_shape, w_shape, attributes", CONV_TRANSPOSE_CASES)
def test_conv_transpose(x_shape, w_shape, attributes):
    bias = normal(w_shape[1] * attributes.get("group", 1))
    check_against_reference(
        "ConvTranspose", [normal(*x_shape), normal(*w_shape), bias], attributes, opset=11
    )


@pytest.mark.parametrize(
    "x_shape, w_shape, attributes",
    [
        # onnx.reference mishandles group > 1 here.
        ((1, 4, 3, 3), (4, 2, 3, 3), {"group": 2, "strides": [2, 2], "output_padding": [1, 0]}),
        ((2, 6, 4, 3), (6, 1, 3, 3), {"group": 3, "pads": [1, 0, 0, 1]}),
        # The spec (and ONNX Runtime) crop the odd pixel at the beginning when output_shape
        # forces an odd total padding; onnx.reference keeps the pads at zero.
        ((1, 2, 4, 4), (2, 1, 3, 3), {"strides": [2, 2], "output_shape": [8, 8]}),
    ],
)
def test_conv_transpose_against_onnxruntime(x_shape, w_shape, attributes):
    pytest.importorskip("onnxruntime")
    bias = normal(w_shape[1] * attributes.get("group", 1))
    check_against_onnxruntime(
        "ConvTranspose", [normal(*x_shape), normal(*w_shape), bias], attributes, opset=11
    )


def integers(dtype, *shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "attributes", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 2, "dilations": [2, 1]}]
)
def test_conv_integer(dtype, attributes):
    x = integers(dtype, 1, 4, 7, 7)
    w = integers(dtype, 4, 4 // attributes.get("group", 1), 3, 3)
    check_against_reference(
        "ConvInteger", [x, w, np.array(3, dtype=dtype), np.array(5, dtype=dtype)], attributes, opset=10
    )


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(dtype, per_channel):
    x = integers(dtype, 1, 3, 6, 6)
    w = integers(dtype, 4, 3, 3, 3)
    w_scale = np.array(0.01, np.float32) if not per_channel else rng.uniform(0.005, 0.02, 4).astype(np.float32)
    w_zero = np.array(2, dtype) if not per_channel else np.zeros(4, dtype)
    inputs = [
        x, np.array(0.02, np.float32), np.array(7, dtype),
        w, w_scale, w_zero,
        np.array(1.3, np.float32), np.array(4, dtype),
        rng.integers(-500, 500, 4).astype(np.int32),
    ]
    check_against_reference("QLinearConv", inputs, {"pads": [1, 1, 1, 1]}, opset=10)
