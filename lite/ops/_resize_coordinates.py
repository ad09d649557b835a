"""Resize's coordinate transformations: where each output index samples the input, along one axis.

:func:`source_coordinates` follows the spec's formulas in float64, with the output length before
flooring (``scale * in_size``) where the spec uses it; :func:`coordinates_f32` computes the same in
float32, operation by operation as ONNX Runtime does, for the integer kernels that must agree with
it exactly (a coordinate cut to 1/1024 of a pixel moves with the last bit).
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError

_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)


def source_coordinates(mode, out_size, in_size, scale, roi):
    """Input coordinate of every output index along one axis; plus the out-of-range mask (crop mode)."""
    y = np.arange(out_size, dtype=np.float64)
    virtual = scale * in_size  # the output length before flooring, as the spec's formulas use it
    outside = None
    if mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        adjustment = out_size / virtual
        offset = in_size / 2 * (1 - adjustment)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = (y + 0.5) / scale - 0.5 if virtual != 1 else np.full(out_size, -0.5)
    elif mode == "align_corners":
        x = y * (in_size - 1) / (virtual - 1) if virtual != 1 else np.zeros(out_size)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if virtual != 1:
            x = y * (end - start) * (in_size - 1) / (virtual - 1)
        else:
            x = np.full(out_size, (end - start) * (in_size - 1) / 2)
        x = x + start * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    else:
        raise UnsupportedOpError(
            f"Resize: coordinate_transformation_mode must be one of {', '.join(_COORDINATE_MODES)}, got {mode!r}"
        )
    return x, outside


def coordinates_f32(mode, out_size, in_size, scale, roi):
    """:func:`source_coordinates` in float32 arithmetic, step by step as ONNX Runtime computes them."""
    f = np.float32
    y = np.arange(out_size, dtype=f)
    s = f(scale)
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and out_size > 1):
        return (y + f(0.5)) / s - f(0.5), None
    if mode == "asymmetric":
        return y / s, None
    if mode == "tf_half_pixel_for_nn":
        return (y + f(0.5)) / s, None
    if mode == "half_pixel_symmetric":
        adjustment = f(out_size) / (s * f(in_size))
        offset = f(in_size) / f(2) * (f(1) - adjustment)
        return offset + (y + f(0.5)) / s - f(0.5), None
    x, outside = source_coordinates(mode, out_size, in_size, scale, roi)
    return x.astype(f), outside
