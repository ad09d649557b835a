"""RoiAlign: average (or max) of bilinear samples over each bin of each region of interest.

https://onnx.ai/onnx/operators/onnx__RoiAlign.html

rois are ``[x1, y1, x2, y2]`` scaled by ``spatial_scale``; ``half_pixel`` (opset 16 default)
shifts them by -0.5, ``output_half_pixel`` (opset 10 behaviour) does not but makes every roi at
least 1x1. Each bin takes ``sampling_ratio`` (or ``ceil(roi / bins)``) samples per axis;
samples more than one cell outside the image count as zero. Bilinear weights are outer
products, so an average bin is ``My @ X @ Mx^T`` with small interpolation matrices.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


def _samples(start, extent, bins, grid, size):
    """Per sample along one axis: (low index, high index, low weight, high weight), zeroed when outside."""
    bin_size = extent / bins
    positions = (
        start
        + np.arange(bins)[:, None] * bin_size
        + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    ).reshape(-1)
    valid = (positions >= -1.0) & (positions <= size)
    positions = np.maximum(positions, 0.0)
    low = np.floor(positions).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    positions = np.where(at_edge, low, positions)
    frac = positions - low
    return low, high, np.where(valid, 1 - frac, 0.0), np.where(valid, frac, 0.0)


def _matrix(low, high, w_low, w_high, bins, grid, size):
    """(bins, size) matrix averaging each bin's samples."""
    matrix = np.zeros((bins * grid, size))
    rows = np.arange(bins * grid)
    np.add.at(matrix, (rows, low), w_low)
    np.add.at(matrix, (rows, high), w_high)
    return matrix.reshape(bins, grid, size).sum(axis=1) / grid


def roi_align(X, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale, half_pixel):
    if mode not in ("avg", "max"):
        raise UnsupportedOpError(f"RoiAlign: mode must be avg or max, got {mode!r}")
    x = np.asarray(X)
    compute = np.float64
    height, width = x.shape[2:]
    rois = np.asarray(rois, dtype=compute)
    y = np.zeros((len(rois), x.shape[1], output_height, output_width), dtype=compute)
    offset = 0.5 if half_pixel else 0.0
    for r, (x1, y1, x2, y2) in enumerate(rois):
        start_w, start_h = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        roi_w, roi_h = x2 * spatial_scale - offset - start_w, y2 * spatial_scale - offset - start_h
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = sampling_ratio if sampling_ratio > 0 else max(math.ceil(roi_h / output_height), 1)
        grid_w = sampling_ratio if sampling_ratio > 0 else max(math.ceil(roi_w / output_width), 1)
        rows = _samples(start_h, roi_h, output_height, grid_h, height)
        cols = _samples(start_w, roi_w, output_width, grid_w, width)
        image = x[int(batch_indices[r])].astype(compute)
        if mode == "avg":
            row_matrix = _matrix(*rows, output_height, grid_h, height)
            col_matrix = _matrix(*cols, output_width, grid_w, width)
            y[r] = row_matrix @ image @ col_matrix.T
            continue
        # max: the largest of the four weighted corner terms of each sample, then over the bin.
        (y_lo, y_hi, wy_lo, wy_hi), (x_lo, x_hi, wx_lo, wx_hi) = rows, cols
        terms = [
            image[:, ya][:, :, xa] * (wy[:, None] * wx[None, :])
            for ya, wy in ((y_lo, wy_lo), (y_hi, wy_hi))
            for xa, wx in ((x_lo, wx_lo), (x_hi, wx_hi))
        ]
        samples = np.maximum.reduce(terms)
        shaped = samples.reshape(x.shape[1], output_height, grid_h, output_width, grid_w)
        y[r] = shaped.max(axis=(2, 4))
    return y.astype(x.dtype)


@kernel("RoiAlign", since=10)
def RoiAlign_10(
    X, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0
):
    return roi_align(
        X, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale, False
    )


@kernel("RoiAlign", since=16)
def RoiAlign(
    X,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode="half_pixel",
    mode="avg",
    output_height=1,
    output_width=1,
    sampling_ratio=0,
    spatial_scale=1.0,
):
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise UnsupportedOpError(
            "RoiAlign: coordinate_transformation_mode must be half_pixel or output_half_pixel, "
            f"got {coordinate_transformation_mode!r}"
        )
    return roi_align(
        X,
        rois,
        batch_indices,
        mode,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
        coordinate_transformation_mode == "half_pixel",
    )
