"""MaxPool: the maximum of each (dilated, strided, padded) window, with optional argmax indices.

https://onnx.ai/onnx/operators/onnx__MaxPool.html

The maximum over a box is separable: the max over the first spatial axis's taps, then over the
next axis's taps of that, and so on. Float images (N, C, H, W) are padded with -inf first (see
:func:`_padded_max_2d`), and on the contiguous padded buffer each tap of an axis is a shift of
the whole flat buffer (:func:`_flat_max_2d`): contiguous passes over every position, then the
windows' corners copied out. Other inputs run the general form below: each axis costs
``kernel[axis]`` ``np.maximum`` passes over strided views, only over the outputs a tap reaches
inside the input (padding never wins a max, so it is never materialised), a block of channels
at a time so the intermediate stays in cache. Indices (opset 8+) are flat positions in the
unpadded input, row-major or, with ``storage_order=1``, column-major over the spatial axes.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from lite.ops._conv_common import pad_input, windows
from lite.ops._pool_common import lowest, pool_geometry
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
    if x.ndim == 4 and x.dtype.kind == "f" and x.size:
        y = _padded_max_2d(x, geometry, allocate)
    else:
        y = _separable_max(x, geometry, allocate)
    if output_count < 2:
        return y
    end = [e + extra for e, extra in zip(geometry.end, geometry.overhang)]
    padded = pad_input(np.asarray(X), geometry.begin, end, lowest(X.dtype))
    return y, _indices(X, padded, geometry, storage_order)


# Elements of the per-block intermediate of _separable_max (it stays in L2).
_BLOCK_ELEMENTS = 64 * 1024


def _padded_max_2d(x, geometry, allocate):
    """Images (N, C, H, W) of floats: the input copied once into a buffer padded with -inf
    (padding then never wins a max, and every window is in range), then the max over the
    kernel's rows and over its columns, each ``kernel - 1`` ``np.maximum`` calls over strided
    views of whole images. A 64x64 model's 3x3 stride-2 pool is six numpy calls instead of
    about twenty around the boundary handling of :func:`_separable_max`. A contiguous buffer (all
    but an unpadded strided input) runs :func:`_flat_max_2d`."""
    padded = _padded(x, geometry, allocate)
    if padded.flags.c_contiguous:
        return _flat_max_2d(padded, geometry, allocate)
    (kernel_h, kernel_w), (stride_h, stride_w) = geometry.kernel, geometry.strides
    (dilation_h, dilation_w), (out_h, out_w) = geometry.dilations, geometry.out_shape
    rows = allocate((*x.shape[:2], out_h, padded.shape[3]), x.dtype)
    span_h, span_w = (out_h - 1) * stride_h + 1, (out_w - 1) * stride_w + 1
    _max_of_taps([padded[:, :, i * dilation_h : i * dilation_h + span_h : stride_h] for i in range(kernel_h)], rows)
    y = allocate((*x.shape[:2], out_h, out_w), x.dtype)
    _max_of_taps([rows[..., j * dilation_w : j * dilation_w + span_w : stride_w] for j in range(kernel_w)], y)
    return y


def _flat_max_2d(padded, geometry, allocate):
    """The max over the windows of a C-contiguous padded buffer (N, C, H, W), every tap of an
    axis a shift of the whole flat buffer: ``rows[k] = max_i flat[k + i*d_h*W]``, then
    ``both[k] = max_j rows[k + j*d_w]``, then the window corners ``both[n, c, o_h*s_h, o_w*s_w]``
    copied out. Each pass is one contiguous, vectorised ``np.maximum`` over everything; the
    strided views of :func:`_padded_max_2d` run numpy's inner loop once per row (16 to 34
    cells on a 64x64 model), which cost more than the work at strides 1 and 2 computes for
    nothing (ResNet's 3x3 stride-2 pool of a 32x32 map: 76 -> 54 µs; GoogLeNet's stride-1
    pools of 8x8 maps: 99 -> 52 µs). Cells near a plane's end combine taps of the next plane
    or of the buffer's unfilled tail, but no window corner reads them: a window fits inside
    its plane, so its corner is at least ``(k_h - 1)*d_h*W + (k_w - 1)*d_w`` cells before the
    plane's end."""
    (kernel_h, kernel_w), (stride_h, stride_w) = geometry.kernel, geometry.strides
    (dilation_h, dilation_w), (out_h, out_w) = geometry.dilations, geometry.out_shape
    batch, channels, height, width = padded.shape
    flat = padded.reshape(-1)
    size = flat.size
    rows_size = size - (kernel_h - 1) * dilation_h * width
    rows = allocate((size,), padded.dtype)
    _max_of_taps([flat[i * dilation_h * width : i * dilation_h * width + rows_size] for i in range(kernel_h)],
                 rows[:rows_size])
    both_size = rows_size - (kernel_w - 1) * dilation_w
    both = allocate((size,), padded.dtype)
    _max_of_taps([rows[j * dilation_w : j * dilation_w + both_size] for j in range(kernel_w)], both[:both_size])
    span_h, span_w = (out_h - 1) * stride_h + 1, (out_w - 1) * stride_w + 1
    y = allocate((batch, channels, out_h, out_w), padded.dtype)
    np.copyto(y, both.reshape(padded.shape)[:, :, :span_h:stride_h, :span_w:stride_w])
    return y


# Padded buffers of this size or less are kept per thread, input shape and geometry, their
# -inf border filled once (a call copies the image into the interior); at most _KEPT of them.
_KEPT_PADDED_BYTES = 256 * 1024
_KEPT = 16
_local = threading.local()


def _padded(x, geometry, allocate):
    begin = geometry.begin
    end = [e + extra for e, extra in zip(geometry.end, geometry.overhang)]
    if min(begin) < 0 or min(end) < 0 or not any(begin) and not any(end):
        return pad_input(x, begin, end, lowest(x.dtype), allocate)
    shape = (*x.shape[:2], x.shape[2] + begin[0] + end[0], x.shape[3] + begin[1] + end[1])
    if math.prod(shape) * x.itemsize > _KEPT_PADDED_BYTES:
        return pad_input(x, begin, end, lowest(x.dtype), allocate)
    kept = getattr(_local, "padded", None)
    if kept is None:
        kept = _local.padded = {}
    key = (x.shape, x.dtype, geometry)
    padded = kept.get(key)
    if padded is None:
        if len(kept) >= _KEPT:
            kept.clear()
        padded = kept[key] = np.full(shape, lowest(x.dtype), x.dtype)
    np.copyto(padded[:, :, begin[0] : begin[0] + x.shape[2], begin[1] : begin[1] + x.shape[3]], x)
    return padded


def _max_of_taps(taps, out) -> None:
    if len(taps) == 1:
        np.copyto(out, taps[0])
        return
    np.maximum(taps[0], taps[1], out=out)
    for tap in taps[2:]:
        np.maximum(out, tap, out=out)


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
    flat = np.ascontiguousarray(view.transpose(order)).reshape(*view.shape[:2], *geometry.out_shape, -1)
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
