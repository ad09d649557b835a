"""MaxPool: the maximum of each (dilated, strided, padded) window, with optional argmax indices.

https://onnx.ai/onnx/operators/onnx__MaxPool.html

The maximum is a running ``np.maximum`` over the kernel taps, each one long contiguous slice
(see ``TapPlan``), instead of a reduction over a strided 2*d-dimensional view. Indices
(opset 8+) are flat positions in the unpadded input, row-major or, with ``storage_order=1``,
column-major over the spatial axes.
"""

from __future__ import annotations

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
    plan = geometry.tap_plan(np.asarray(X), lowest(X.dtype))
    regions = plan.regions()
    y = np.array(next(regions))
    for region in regions:
        np.maximum(y, region, out=y)
    y = np.ascontiguousarray(plan.crop(y))
    if output_count < 2:
        return y
    end = [e + extra for e, extra in zip(geometry.end, geometry.overhang)]
    padded = pad_input(np.asarray(X), geometry.begin, end, lowest(X.dtype))
    return y, _indices(X, padded, geometry, storage_order)


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
    base = (np.arange(batch * channels) * int(np.prod(spatial))).reshape(
        (batch, channels) + (1,) * rank
    )
    return (base + position).astype(np.int64)
