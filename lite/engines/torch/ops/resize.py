"""Resize (and Upsample): https://onnx.ai/onnx/operators/onnx__Resize.html.

Covered: ``nearest`` in every coordinate transformation and rounding mode the spec lists except
``tf_crop_and_resize`` and ``half_pixel_symmetric`` (exact source indices, gathered per axis);
``linear`` with ``half_pixel``, ``pytorch_half_pixel`` or ``align_corners``, and ``cubic`` on 4-D
inputs with the spec's default coefficient (-0.75) and ``exclude_outside=0`` (both through
``F.interpolate``, whose sampling is exactly those modes). Other combinations, ``antialias``,
``axes`` and ``keep_aspect_ratio_policy`` run on the numpy engine.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lite.engines.torch.ops._values import host_floats, host_ints
from lite.engines.torch.ops.registry import lowering

_NEAREST_COORDINATES = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}
_LINEAR_COORDINATES = {"half_pixel", "pytorch_half_pixel", "align_corners"}
_INTERPOLATE = {3: "linear", 4: "bilinear", 5: "trilinear"}


def check_resize(attributes: dict[str, Any]) -> str | None:
    mode = attributes.get("mode", "nearest")
    coordinates = attributes.get("coordinate_transformation_mode", "half_pixel")
    if attributes.get("antialias", 0) or attributes.get("axes") or \
            attributes.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "Resize with antialias, axes or keep_aspect_ratio_policy"
    if mode == "nearest" and coordinates in _NEAREST_COORDINATES:
        return None
    if mode == "linear" and coordinates in _LINEAR_COORDINATES:
        return None
    if mode == "cubic" and coordinates in _LINEAR_COORDINATES and attributes.get("cubic_coeff_a", -0.75) == -0.75 \
            and not attributes.get("exclude_outside", 0):
        return None
    return f"Resize mode={mode!r} coordinate_transformation_mode={coordinates!r}"


@lowering("Resize", since=11, static=(1, 2, 3), check=check_resize)
def Resize(X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor"):
    scale_list = host_floats(scales) if scales is not None and not _empty(scales) else None
    return _resize(X, scale_list, None if scale_list is not None else host_ints(sizes), mode,
                   coordinate_transformation_mode, nearest_mode)


@lowering("Resize", since=10, static=(1,), check=check_resize)
def Resize_10(X, scales, *, mode="nearest"):
    return _resize(X, host_floats(scales), None, mode, "asymmetric", "floor")


@lowering("Upsample", since=9, static=(1,), check=check_resize)
def Upsample(X, scales, *, mode="nearest"):
    return _resize(X, host_floats(scales), None, mode, "asymmetric", "floor")


def _empty(value) -> bool:
    return isinstance(value, list) and not value or isinstance(value, torch.Tensor) and value.numel() == 0


def _resize(X, scales, sizes, mode, coordinates, nearest_mode):
    shape = list(X.shape)
    given_scales = sizes is None
    if given_scales:
        sizes = [math.floor(n * s) for n, s in zip(shape, scales)]
    else:
        scales = [m / n for m, n in zip(sizes, shape)]
    if sizes[:2] != shape[:2]:
        raise NotImplementedError("the torch engine resizes spatial axes only (batch and channels kept)")
    if mode == "nearest":
        return _nearest(X, scales, sizes, coordinates, nearest_mode)
    interpolation = _INTERPOLATE[X.dim()] if mode == "linear" else "bicubic"
    if coordinates == "align_corners":
        return F.interpolate(X, size=sizes[2:], mode=interpolation, align_corners=True)
    if given_scales:
        # The spec maps output to input coordinates with the scales as given, not recomputed.
        return F.interpolate(X, scale_factor=scales[2:], mode=interpolation, align_corners=False,
                             recompute_scale_factor=False)
    return F.interpolate(X, size=sizes[2:], mode=interpolation, align_corners=False)


def _nearest(X, scales, sizes, coordinates, nearest_mode):
    for axis in range(2, X.dim()):
        n, m, s = X.shape[axis], sizes[axis], scales[axis]
        if n == m and s == 1:
            continue
        x = np.arange(m, dtype=np.float64)
        if coordinates == "align_corners":
            source = x * (n - 1) / (m - 1) if m > 1 else np.zeros(m)
        elif coordinates == "asymmetric":
            source = x / s
        else:
            source = (x + 0.5) / s - 0.5
            if coordinates == "pytorch_half_pixel" and m == 1:
                source = np.zeros(m)
        if nearest_mode == "round_prefer_ceil":
            index = np.floor(source + 0.5)
        elif nearest_mode == "floor":
            index = np.floor(source)
        elif nearest_mode == "ceil":
            index = np.ceil(source)
        else:  # round_prefer_floor
            index = np.ceil(source - 0.5)
        index = np.clip(index, 0, n - 1).astype(np.int64)
        X = X.index_select(axis, torch.tensor(index.tolist(), dtype=torch.long, device=X.device))
    return X
