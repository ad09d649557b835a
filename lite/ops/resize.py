"""Resize: nearest / linear / cubic interpolation of any axes, by scales or by sizes.

https://onnx.ai/onnx/operators/onnx__Resize.html

Interpolation is separable, so each resized axis is done on its own: an output coordinate maps
back to an input coordinate (``coordinate_transformation_mode``), and either picks one input
index (nearest, via ``np.take``: exact for any dtype) or mixes a few neighbours with weights
gathered into an ``(out, in)`` matrix applied by one matrix product. Neighbours past the edge
repeat the edge sample; ``exclude_outside`` drops them and renormalizes. ``antialias``
(opset 18) widens the linear/cubic filter by ``1 / scale`` when downsampling.

Integer inputs resized linearly are computed as ONNX Runtime computes them, because
verification compares integer outputs exactly: 4-D images over their two spatial axes by
:func:`_integer_bilinear`, other linear resizes cut toward zero as a C cast does. Cubic integer
resizes, which ONNX Runtime does not run, are rounded as the spec's reference does.

Opset 10 has only ``mode``: its coordinates are asymmetric (``x / scale``) and nearest rounds
down when upsampling and up when downsampling, as ONNX Runtime does.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._resize_coordinates import coordinates_f32, source_coordinates
from lite.ops.registry import kernel

_MODES = ("nearest", "linear", "cubic")


def _optional(values):
    if values is None:
        return None
    values = np.asarray(values)
    return None if values.size == 0 else values


def _target(x, scales, sizes, axes, policy):
    """Full-rank (scale per axis, output size per axis) per the spec's scales/sizes rules."""
    rank = x.ndim
    axes = list(range(rank)) if not axes else [a + rank if a < 0 else a for a in axes]
    scale = [1.0] * rank
    size = list(x.shape)
    if sizes is not None:
        if len(sizes) != len(axes):
            raise UnsupportedOpError(f"Resize: sizes has {len(sizes)} entries for {len(axes)} axes")
        for axis, value in zip(axes, sizes.tolist()):
            size[axis] = int(value)
            # An empty axis (a batch of 0) has no scale to speak of; it stays empty.
            scale[axis] = int(value) / x.shape[axis] if x.shape[axis] else 1.0
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise UnsupportedOpError(
                    f"Resize: keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, got {policy!r}"
                )
            chosen = [scale[a] for a in axes]
            common = min(chosen) if policy == "not_larger" else max(chosen)
            for axis in axes:
                scale[axis] = common
                size[axis] = int(common * x.shape[axis] + 0.5)
    elif scales is not None:
        if len(scales) != len(axes):
            raise UnsupportedOpError(f"Resize: scales has {len(scales)} entries for {len(axes)} axes")
        for axis, value in zip(axes, scales.tolist()):
            scale[axis] = float(np.float32(value))
            size[axis] = int(np.floor(np.float64(np.float32(value)) * x.shape[axis]))
    else:
        raise UnsupportedOpError("Resize: one of scales or sizes must be given")
    return axes, scale, size


def _nearest_indices(x, nearest_mode, in_size):
    base = np.floor(x)
    ratio = x - base
    if nearest_mode == "round_prefer_floor":
        step = ratio > 0.5
    elif nearest_mode == "round_prefer_ceil":
        step = ratio >= 0.5
    elif nearest_mode == "floor":
        step = np.zeros_like(ratio, dtype=bool)
    elif nearest_mode == "ceil":
        step = ratio > 0
    else:
        raise UnsupportedOpError(
            f"Resize: nearest_mode must be round_prefer_floor, round_prefer_ceil, floor or ceil, got {nearest_mode!r}"
        )
    return np.clip(base + step, 0, in_size - 1).astype(np.intp)


def _cubic(t, a):
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _weights(x, in_size, mode, scale, cubic_coeff_a, exclude_outside, antialias):
    """The ``(out, in)`` matrix mixing input samples into each output sample."""
    base = np.floor(x)
    ratio = x - base
    # An exact integer coordinate is taken as ratio 1 from the sample before it (the spec's
    # reference convention; it matters only for which edge samples exclude_outside drops).
    exact = ratio == 0
    base = np.where(exact, base - 1, base)
    ratio = np.where(exact, 1.0, ratio)
    stretch = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        first = int(math.floor(-1 / stretch) + 1)
        offsets = np.arange(first, 2 - first)
        coeffs = np.clip(1 - np.abs((offsets[None, :] - ratio[:, None]) * stretch), 0, 1)
    else:
        first = int(math.floor(-2 / stretch) + 1)
        offsets = np.arange(first, 2 - first)
        coeffs = _cubic((offsets[None, :] - ratio[:, None]) * stretch, cubic_coeff_a)
    if antialias:
        coeffs = coeffs / coeffs.sum(axis=1, keepdims=True)
    indices = base.astype(np.int64)[:, None] + offsets[None, :]
    if exclude_outside:
        coeffs = np.where((indices < 0) | (indices >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    matrix = np.zeros((len(x), in_size))
    rows = np.repeat(np.arange(len(x)), indices.shape[1])
    np.add.at(matrix, (rows, np.clip(indices, 0, in_size - 1).ravel()), coeffs.ravel())
    return matrix


def _resize_axis(data, axis, out_size, scale, roi, options):
    in_size = data.shape[axis]
    x, outside = source_coordinates(
        options["coordinate_transformation_mode"], out_size, in_size, scale, roi
    )
    if options["mode"] == "nearest":
        result = np.take(data, _nearest_indices(x, options["nearest_mode"], in_size), axis=axis)
    else:
        matrix = _weights(
            x,
            in_size,
            options["mode"],
            scale,
            options["cubic_coeff_a"],
            options["exclude_outside"],
            options["antialias"],
        ).astype(data.dtype)
        result = np.moveaxis(np.tensordot(matrix, data, axes=([1], [axis])), 0, axis)
    if outside is not None and outside.any():
        shape = [1] * data.ndim
        shape[axis] = out_size
        result = np.where(outside.reshape(shape), data.dtype.type(options["extrapolation_value"]), result)
    return result


def resize(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    antialias=0,
    axes=None,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch",
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    if mode not in _MODES:
        raise UnsupportedOpError(f"Resize: mode must be nearest, linear or cubic, got {mode!r}")
    if antialias and mode == "nearest":
        raise UnsupportedOpError("Resize: antialias applies to linear and cubic modes only")
    x = np.asarray(X)
    axes, scale, size = _target(x, _optional(scales), _optional(sizes), axes, keep_aspect_ratio_policy)
    roi = _optional(roi)
    rank = x.ndim
    full_roi = None
    if coordinate_transformation_mode == "tf_crop_and_resize":
        if roi is None:
            raise UnsupportedOpError("Resize: tf_crop_and_resize needs the roi input")
        starts, ends = [0.0] * rank, [1.0] * rank
        count = len(roi) // 2
        for i, axis in enumerate(axes if count == len(axes) else range(rank)):
            starts[axis], ends[axis] = float(roi[i]), float(roi[count + i])
        full_roi = list(zip(starts, ends))
    options = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "extrapolation_value": extrapolation_value,
        "antialias": antialias,
    }
    integer = x.dtype.kind in "iub"
    resized = [axis for axis in axes if not (
        size[axis] == x.shape[axis] and math.isclose(scale[axis], 1.0)
        and (full_roi is None or full_roi[axis] == (0.0, 1.0)))]
    if mode == "linear" and not antialias and integer and x.ndim == 4 and resized in ([1, 2], [2, 3]):
        return _integer_bilinear(x, resized, size, scale, full_roi, options)
    data = x if mode == "nearest" or x.dtype in (np.float32, np.float64) else x.astype(np.float32)
    for axis in resized:
        axis_roi = None if full_roi is None else full_roi[axis]
        data = _resize_axis(data, axis, size[axis], scale[axis], axis_roi, options)
    if integer and data.dtype != x.dtype:
        # Linear: cut toward zero, as ONNX Runtime's kernels cast (verification compares integer
        # outputs exactly); cubic, which ONNX Runtime does not run on integers: rounded, as the
        # spec's reference does.
        info = np.iinfo(x.dtype)
        data = np.clip(np.trunc(data) if mode == "linear" else np.rint(data), info.min, info.max)
    return data.astype(x.dtype, copy=False)


def _integer_bilinear(x, axes, size, scale, full_roi, options):
    """Integer images (N, C, H, W or N, H, W, C) resized linearly over their two spatial axes,
    computed as ONNX Runtime computes them, so that integer outputs agree exactly (verification
    compares them exactly; the spec's reference rounds instead): coordinates in float32, clamped
    to the input; 8-bit channels-last images in fixed point (each coordinate cut to 1/1024 of a
    pixel, the four taps' weights products of those, 2^20 in all), everything else as float32
    weights times samples; the sum cut toward zero as a C cast does. Cropping
    (tf_crop_and_resize) puts the extrapolation value outside the input."""
    fixed = axes == [1, 2] and x.dtype in (np.uint8, np.int8)
    taps, outside = [], []
    for axis in axes:
        in_size = x.shape[axis]
        roi = None if full_roi is None else full_roi[axis]
        coordinate, out = coordinates_f32(options["coordinate_transformation_mode"], size[axis], in_size,
                                           scale[axis], roi)
        coordinate = np.clip(coordinate, np.float32(0), np.float32(in_size - 1))
        low = np.minimum(coordinate.astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        if fixed:
            toward_high = np.abs((coordinate * np.float32(1024)).astype(np.int64) - low * 1024)
            weights = (1024 - toward_high, toward_high)
            weights = tuple(np.where(low == high, 512, w) for w in weights)
        else:
            weights = (np.abs(coordinate - high.astype(np.float32)), np.abs(coordinate - low.astype(np.float32)))
            weights = tuple(np.where(low == high, np.float32(0.5), w).astype(np.float32) for w in weights)
        shape = [1] * x.ndim
        shape[axis] = size[axis]
        taps.append((low, high, *(w.reshape(shape) for w in weights)))
        outside.append(None if out is None else out.reshape(shape))
    (y1, y2, wy1, wy2), (x1, x2, wx1, wx2) = taps
    h_axis, w_axis = axes
    data = x.astype(np.int64 if fixed else np.float32)
    top, bottom = np.take(data, y1, axis=h_axis), np.take(data, y2, axis=h_axis)
    a, b = np.take(top, x1, axis=w_axis), np.take(top, x2, axis=w_axis)
    c, d = np.take(bottom, x1, axis=w_axis), np.take(bottom, x2, axis=w_axis)
    if fixed:
        total = (wx1 * wy1) * a + (wx2 * wy1) * b + (wx1 * wy2) * c + (wx2 * wy2) * d
        result = np.sign(total) * (np.abs(total) >> 20)
    else:
        result = np.trunc(wx1 * wy1 * a + wx2 * wy1 * b + wx1 * wy2 * c + wx2 * wy2 * d)
    if outside[0] is not None:
        result = np.where(outside[0] | outside[1], np.trunc(np.float32(options["extrapolation_value"])), result)
    info = np.iinfo(x.dtype)
    return np.clip(result, info.min, info.max).astype(x.dtype)


def resize_opset10(X, scales, mode):
    """Resize-10 / Upsample: asymmetric coordinates, nearest floors (upsampling) or ceils (downsampling)."""
    if mode not in ("nearest", "linear"):
        raise UnsupportedOpError(f"Resize-10: mode must be nearest or linear, got {mode!r}")
    x = np.asarray(X)
    scales = np.asarray(scales, dtype=np.float32)
    if len(scales) != x.ndim:
        raise UnsupportedOpError(f"Resize-10: scales has {len(scales)} entries for a rank-{x.ndim} input")
    data = x if mode == "nearest" or x.dtype.kind == "f" else x.astype(np.float32)
    for axis, value in enumerate(scales.tolist()):
        in_size = data.shape[axis]
        out_size = int(np.floor(np.float64(np.float32(value)) * in_size))
        if out_size == in_size and value == 1.0:
            continue
        source = np.arange(out_size) / float(value)
        if mode == "nearest":
            index = np.ceil(source) if value < 1 else np.floor(source)
            data = np.take(data, np.clip(index, 0, in_size - 1).astype(np.intp), axis=axis)
        else:
            matrix = _weights(np.minimum(source, in_size - 1), in_size, "linear", value, -0.75, 0, 0)
            data = np.moveaxis(np.tensordot(matrix.astype(data.dtype), data, axes=([1], [axis])), 0, axis)
    if x.dtype.kind in "iub" and data.dtype != x.dtype:
        info = np.iinfo(x.dtype)
        data = np.clip(np.trunc(data), info.min, info.max)
    return data.astype(x.dtype, copy=False)


@kernel("Resize", since=10)
def Resize_10(X, scales, *, mode="nearest"):
    return resize_opset10(X, scales, mode)


@kernel("Resize", since=11)
def Resize_11(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    _reject_symmetric(coordinate_transformation_mode, 11)
    return resize(
        X,
        roi,
        scales,
        sizes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        mode=mode,
        nearest_mode=nearest_mode,
    )


@kernel("Resize", since=18)
def Resize_18(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    antialias=0,
    axes=None,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch",
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    _reject_symmetric(coordinate_transformation_mode, 18)
    return Resize(
        X,
        roi,
        scales,
        sizes,
        antialias=antialias,
        axes=axes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy,
        mode=mode,
        nearest_mode=nearest_mode,
    )


@kernel("Resize", since=19)
def Resize(
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    antialias=0,
    axes=None,
    coordinate_transformation_mode="half_pixel",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
    keep_aspect_ratio_policy="stretch",
    mode="nearest",
    nearest_mode="round_prefer_floor",
):
    return resize(
        X,
        roi,
        scales,
        sizes,
        antialias=antialias,
        axes=axes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy,
        mode=mode,
        nearest_mode=nearest_mode,
    )


def _reject_symmetric(mode, opset):
    if mode == "half_pixel_symmetric":
        raise UnsupportedOpError(
            f"Resize-{opset}: half_pixel_symmetric needs opset 19 or later"
        )
