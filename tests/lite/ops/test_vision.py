"""GridSample, RoiAlign, NonMaxSuppression, CenterCropPad, Col2Im, MaxRoiPool."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_onnxruntime, check_against_reference

rng = np.random.default_rng(8)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    x = normal(2, 3, 5, 6)
    grid = rng.uniform(-1.3, 1.3, size=(2, 4, 7, 2)).astype(np.float32)
    attributes = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    check_against_reference("GridSample", [x, grid], attributes, opset=20, atol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_grid_sample_opset16_names(mode):
    x = normal(1, 2, 4, 4)
    grid = rng.uniform(-1, 1, size=(1, 3, 3, 2)).astype(np.float32)
    check_against_onnxruntime("GridSample", [x, grid], {"mode": mode}, opset=16, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(mode):
    x = normal(1, 2, 3, 4, 5)
    grid = rng.uniform(-1.1, 1.1, size=(1, 2, 3, 4, 3)).astype(np.float32)
    check_against_reference("GridSample", [x, grid], {"mode": mode}, opset=20, atol=1e-4)


ROIS = np.array([[0, 0, 5, 6], [1.2, 0.7, 3.4, 7.9], [2, 2, 2.5, 2.5], [-1, -1, 9, 9]], dtype=np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align(mode, transform, sampling_ratio):
    x = normal(2, 3, 8, 9)
    attributes = {
        "mode": mode,
        "coordinate_transformation_mode": transform,
        "output_height": 3,
        "output_width": 2,
        "sampling_ratio": sampling_ratio,
        "spatial_scale": 0.9,
    }
    batch_indices = np.array([0, 1, 1, 0], dtype=np.int64)
    check_against_onnxruntime("RoiAlign", [x, ROIS, batch_indices], attributes, opset=16, atol=1e-4)


def test_roi_align_against_reference():
    x = normal(1, 2, 8, 9)
    attributes = {"output_height": 2, "output_width": 3, "sampling_ratio": 2}
    check_against_reference("RoiAlign", [x, ROIS[:2], np.zeros(2, np.int64)], attributes, opset=16, atol=1e-4)


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("score_threshold", [None, 0.3])
def test_non_max_suppression(center_point_box, score_threshold):
    corners = rng.uniform(0, 10, size=(2, 12, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners[:, :, 0], corners[:, :, 0] + rng.uniform(1, 4, (2, 12, 2))], axis=-1)
    boxes = boxes.astype(np.float32)
    scores = rng.uniform(0, 1, size=(2, 3, 12)).astype(np.float32)
    inputs = [
        boxes, scores, np.array([4], np.int64), np.array([0.3], np.float32),
        None if score_threshold is None else np.array([score_threshold], np.float32),
    ]
    check_against_reference(
        "NonMaxSuppression", inputs, {"center_point_box": center_point_box}, opset=11
    )


@pytest.mark.parametrize("shape, axes", [((3, 7, 8), None), ((6, 2, 5), None), ((2, 9), [0, 2]), ((4,), [2])])
def test_center_crop_pad(shape, axes):
    x = normal(4, 5, 6)
    attributes = {} if axes is None else {"axes": axes}
    check_against_reference("CenterCropPad", [x, np.array(shape, np.int64)], attributes, opset=18)


@pytest.mark.parametrize(
    "attributes", [{}, {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}]
)
def test_col2im(attributes):
    image, block = np.array([5, 6], np.int64), np.array([2, 3], np.int64)
    strides = attributes.get("strides", [1, 1])
    dilations = attributes.get("dilations", [1, 1])
    pads = attributes.get("pads", [0, 0, 0, 0])
    positions = [
        (image[d] + pads[d] + pads[d + 2] - ((block[d] - 1) * dilations[d] + 1)) // strides[d] + 1 for d in range(2)
    ]
    x = normal(2, 3 * 6, int(np.prod(positions)))
    check_against_reference("Col2Im", [x, image, block], attributes, opset=18)


def test_max_roi_pool():
    x = normal(2, 3, 8, 9)
    rois = np.array([[0, 0, 0, 5, 6], [1, 1.2, 0.7, 3.4, 7.9], [1, 2, 2, 2, 2]], dtype=np.float32)
    # onnx.reference has no MaxRoiPool.
    check_against_onnxruntime("MaxRoiPool", [x, rois], {"pooled_shape": [2, 3], "spatial_scale": 0.8}, opset=1)
