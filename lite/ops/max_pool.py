"""MaxPool: the maximum of each (dilated, strided, padded) window, with optional argmax indices.

https://onnx.ai/onnx/operators/onnx__MaxPool.html

The maximum over a box is separable: the max over the first spatial axis's taps, then over the
next axis's taps of that, and so on. Float images (N, C, H, W) take each tap of an axis as a
shift of the whole flat input (:mod:`lite.ops._shifted_max`): contiguous passes over every
position, the windows crossing the input's edges worked out again, then the windows' corners
copied out. Other inputs run the general form below: each axis costs
``kernel[axis]`` ``np.maximum`` passes over strided views, only over the outputs a tap reaches
inside the input (padding never wins a max, so it is never materialised), a block of channels
at a time so the intermediate stays in cache. Indices (opset 8+) are flat positions in the
unpadded input, row-major or, with ``storage_order=1``, column-major over the spatial axes.
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops._conv_common import pad_input, windows
from lite.ops._pool_common import lowest, pool_geometry
from lite.ops._shifted_max import shifted_max_2d
from lite.ops.registry import kernel


@kernel("MaxPool", since=1)
def MaxPool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    dilations=None,
    kernel_shape=None,
    pads=None,
    storage_order=0,
    strides=None,
    output_count=1,
    allocate=np.empty,
):
    geometry = pool_geometry(
        "MaxPool",
        X,
        kernel_shape=kernel_shape,
        strides=strides,
        dilations=dilations,
        auto_pad=auto_pad,
        pads=pads,
        ceil_mode=ceil_mode,
    )
    x = np.asarray(X)
    if 0 in geometry.out_shape and x.ndim > 2:
        # No output cell (a window that overhangs the padded input by one to two strides, as
        # ONNX Runtime sizes it; more is the geometry's error), answered before any loop over the
        # kernel's taps (a damaged file's kernel of 4e9 columns built 4e9 views).
        y = np.empty((*x.shape[:2], *geometry.out_shape), x.dtype)
        return y if output_count < 2 else (y, np.empty(y.shape, np.int64))
    y = shifted_max_2d(x, geometry, allocate) if x.ndim == 4 and x.dtype.kind == "f" and x.size else None
    if y is None:
        y = _separable_max(x, geometry, allocate)
    if output_count < 2:
        return y
    end = [e + extra for e, extra in zip(geometry.end, geometry.overhang)]
    padded = pad_input(np.asarray(X), geometry.begin, end, lowest(X.dtype))
    return y, _indices(X, padded, geometry, storage_order)


# Elements of the per-block intermediate of _separable_max (it stays in L2).
_BLOCK_ELEMENTS = 64 * 1024


def _separable_max(x, geometry, allocate):
    lead, spatial = x.shape[:2], x.shape[2:]
    planes = x.reshape((-1,) + spatial)
    y = allocate(lead + tuple(geometry.out_shape), x.dtype)
    flat_y = y.reshape((-1,) + tuple(geometry.out_shape))
    largest = max(
        math.prod(geometry.out_shape[: axis + 1] + list(spatial[axis + 1 :]))
        for axis in range(len(spatial))
    )
    block = max(1, _BLOCK_ELEMENTS // max(largest, 1))
    for start in range(0, planes.shape[0], block):
        current = planes[start : start + block]
        for axis in range(len(spatial)):
            last = axis == len(spatial) - 1
            shape = current.shape[: axis + 1] + (geometry.out_shape[axis],) + current.shape[axis + 2 :]
            target = flat_y[start : start + block] if last else allocate(shape, x.dtype)
            _max_along(current, target, axis + 1, geometry, axis)
            current = target
    return y


def _max_along(source, target, axis, geometry, spatial_axis):
    """target[..., j, ...] = max over taps t of source[..., j*s + t*d - b, ...] (inside the input)."""
    size, length = source.shape[axis], target.shape[axis]
    stride, dilation = geometry.strides[spatial_axis], geometry.dilations[spatial_axis]
    begin = geometry.begin[spatial_axis]
    low = lowest(source.dtype)
    lead = (slice(None),) * axis
    covered = False
    for tap in range(geometry.kernel[spatial_axis]):
        offset = tap * dilation - begin
        # Outputs j with 0 <= j*stride + offset < size: from ceil(-offset / stride) to below
        # floor((size - 1 - offset) / stride) + 1.
        first = max(0, -(offset // stride))
        stop = min(length, (size - 1 - offset) // stride + 1) if size - 1 - offset >= 0 else 0
        if stop <= first:
            continue
        region = source[lead + (slice(first * stride + offset, (stop - 1) * stride + offset + 1, stride),)]
        out = target[lead + (slice(first, stop),)]
        if not covered:
            target[lead + (slice(0, first),)] = low
            target[lead + (slice(stop, None),)] = low
            np.copyto(out, region)
            covered = True
        else:
            np.maximum(out, region, out=out)
    if not covered:
        target[...] = low


def _indices(X, padded, geometry, storage_order):
    rank = len(geometry.kernel)
    view = windows(padded, geometry.kernel, geometry.strides, geometry.dilations, geometry.out_shape)
    # (N, C, *out, *kernel) -> flat kernel axis, first maximum wins ties.
    order = (0, 1) + tuple(range(2 + rank, 2 + 2 * rank)) + tuple(range(2, 2 + rank))
    # The tap count spelled out: numpy cannot infer -1 for a batch of 0.
    taps = math.prod(geometry.kernel)
    flat = np.ascontiguousarray(view.transpose(order)).reshape(*view.shape[:2], *geometry.out_shape, taps)
    tap = np.unravel_index(np.argmax(flat, axis=-1), geometry.kernel)
    spatial = X.shape[2:]
    coords = []
    for axis in range(rank):
        grid_shape = [1] * rank
        grid_shape[axis] = geometry.out_shape[axis]
        start = (np.arange(geometry.out_shape[axis]) * geometry.strides[axis]).reshape(grid_shape)
        coords.append(start + tap[axis] * geometry.dilations[axis] - geometry.begin[axis])
    if storage_order == 1:
        position = np.ravel_multi_index(coords[::-1], spatial[::-1], mode="clip")
    else:
        position = np.ravel_multi_index(coords, spatial, mode="clip")
    batch, channels = X.shape[:2]
    base = (np.arange(batch * channels) * math.prod(spatial)).reshape(
        (batch, channels) + (1,) * rank
    )
    return (base + position).astype(np.int64)
