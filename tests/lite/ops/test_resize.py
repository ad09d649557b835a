"""Resize (opsets 10-19) and Upsample against onnx.reference / ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_onnxruntime, check_against_reference

rng = np.random.default_rng(5)
X = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
EMPTY = np.array([], dtype=np.float32)

COORDINATE_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]


def scales(*values):
    return np.array(values, dtype=np.float32)


def sizes(*values):
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES + ["half_pixel_symmetric"])
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("factors", [(1, 1, 2.0, 1.5), (1, 1, 0.6, 0.45)])
def test_resize_nearest_scales(coordinate_mode, nearest_mode, factors):
    attributes = {"mode": "nearest", "coordinate_transformation_mode": coordinate_mode, "nearest_mode": nearest_mode}
    check_against_reference("Resize", [X, EMPTY, scales(*factors)], attributes, opset=19)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES + ["half_pixel_symmetric"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_linear_cubic_sizes(mode, coordinate_mode, exclude_outside):
    attributes = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_mode,
        "exclude_outside": exclude_outside,
        "cubic_coeff_a": -0.5,
    }
    for target in [(1, 2, 9, 4), (1, 2, 3, 11), (1, 2, 1, 1)]:
        check_against_reference("Resize", [X, EMPTY, None, sizes(*target)], attributes, opset=19)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("factors", [(1, 1, 0.5, 0.3), (1, 1, 1.7, 0.6)])
def test_resize_antialias(mode, factors):
    attributes = {"mode": mode, "antialias": 1}
    check_against_reference("Resize", [X, EMPTY, scales(*factors)], attributes, opset=18)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode):
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], dtype=np.float32)
    attributes = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0}
    check_against_reference("Resize", [X, roi, None, sizes(1, 2, 4, 6)], attributes, opset=13)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_and_keep_aspect_ratio(policy):
    attributes = {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": policy}
    check_against_reference("Resize", [X, None, None, sizes(9, 8)], attributes, opset=18)


def test_resize_axes_with_scales():
    attributes = {"mode": "cubic", "axes": [3]}
    check_against_reference("Resize", [X, None, scales(1.6)], attributes, opset=18)


def test_resize_uint8_linear_rounds_and_saturates():
    image = rng.integers(0, 256, size=(1, 3, 4, 4)).astype(np.uint8)
    check_against_reference("Resize", [image, EMPTY, scales(1, 1, 1.5, 2.5)], {"mode": "cubic"}, opset=13)


def test_resize_opset_11_cubic_defaults():
    check_against_reference("Resize", [X, EMPTY, scales(1, 1, 2.0, 0.7)], {"mode": "cubic"}, opset=11)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("factors", [(1, 1, 2.0, 3.0), (1, 1, 0.6, 0.5), (1, 1, 1.5, 2.5)])
def test_resize_opset10_against_onnxruntime(mode, factors):
    check_against_onnxruntime("Resize", [X, scales(*factors)], {"mode": mode}, opset=10)


@pytest.mark.parametrize("opset", [9])
def test_upsample_nearest(opset):
    check_against_reference("Upsample", [X, scales(1, 1, 2, 3)], {"mode": "nearest"}, opset=opset)
    check_against_onnxruntime("Upsample", [X, scales(1, 1, 2, 1.5)], {"mode": "linear"}, opset=opset)


@pytest.mark.parametrize("factors", [(1, 1, 2.0, 1.5), (1, 1, 0.6, 0.45)])
def test_resize_tf_half_pixel_for_nn(factors):
    # Opset 11 only; onnx.reference no longer implements it.
    attributes = {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}
    check_against_onnxruntime("Resize", [X, EMPTY, scales(*factors)], attributes, opset=11)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("coordinate_mode", ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"])
def test_resize_integer_linear_equals_onnxruntime(dtype, channels_last, coordinate_mode):
    """Integer images resized linearly agree with ONNX Runtime element for element (verification
    compares integer outputs exactly): its float32 arithmetic cut toward zero, and for 8-bit
    channels-last images its fixed point. They differed by one in about half the elements when
    the numpy engine rounded, so a default conversion of such a model failed verification."""
    info = np.iinfo(dtype)
    shape = (2, 10, 12, 3) if channels_last else (2, 3, 10, 12)
    image = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, size=shape).astype(dtype)
    factors = [(1.7, 0.6), (3.0, 2.0), (0.5, 0.5)] if coordinate_mode != "align_corners" else [(2.0, 3.0)]
    for height, width in factors:
        factor = (1, height, width, 1) if channels_last else (1, 1, height, width)
        check_against_onnxruntime("Resize", [image, EMPTY, scales(*factor)],
                                  {"mode": "linear", "coordinate_transformation_mode": coordinate_mode}, opset=19)
    target = (2, 7, 17, 3) if channels_last else (2, 3, 7, 17)
    check_against_onnxruntime("Resize", [image, EMPTY, None, sizes(*target)],
                              {"mode": "linear", "coordinate_transformation_mode": coordinate_mode}, opset=19)
