"""AveragePool: the mean of each window; pads count only with ``count_include_pad=1``.

https://onnx.ai/onnx/operators/onnx__AveragePool.html

Cells a ``ceil_mode`` window reaches past the padded input never count. The denominator is
separable over the spatial axes, so it is an outer product of 1-D counts. A 3x3 window at stride
1 with one cell of padding (the output the input's size: PoolFormer's token mixer) sums
separably, by shifted slices (:func:`same_size_average`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops._pool_common import pool_geometry, same_size_3x3_sum, tile_sum
from lite.ops.registry import kernel


@kernel("AveragePool", since=1)
def AveragePool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    count_include_pad=0,
    dilations=None,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    geometry = pool_geometry(
        "AveragePool",
        X,
        kernel_shape=kernel_shape,
        strides=strides,
        dilations=dilations,
        auto_pad=auto_pad,
        pads=pads,
        ceil_mode=ceil_mode,
    )
    if 0 in geometry.out_shape:  # no window fits (see lite.ops._pool_common): nothing to sum
        return np.empty((*X.shape[:2], *geometry.out_shape), X.dtype)
    dtype = compute_dtype(X)
    if geometry.same_size_3x3() and X.size:
        total = same_size_average(np.asarray(X, dtype=dtype), bool(count_include_pad))
        return total.astype(X.dtype, copy=False)
    divisor = geometry.divisor(X.shape[2:], bool(count_include_pad)).astype(dtype)
    if geometry.covers_input(X.shape[2:]):
        # One window over the whole input: its sum is the input's (the padding adds nothing).
        total = np.add.reduce(np.asarray(X, dtype=dtype), axis=tuple(range(2, X.ndim)), keepdims=True)
        return (total / divisor).astype(X.dtype, copy=False)
    if geometry.tiles(X.shape[2:]):
        # Windows side by side: sums of every k-th slice along each axis.
        total = tile_sum(np.asarray(X, dtype=dtype), geometry)
        total /= dtype.type(math.prod(geometry.kernel))
        return total.astype(X.dtype, copy=False)
    plan = geometry.tap_plan(np.asarray(X, dtype=dtype), 0)
    regions = plan.regions()
    total = np.array(next(regions))
    for region in regions:
        total += region
    total = plan.crop(total)
    return (total / divisor).astype(X.dtype, copy=False)


def same_size_average(x: np.ndarray, include_pads: bool) -> np.ndarray:
    """AveragePool(3x3, stride 1, pads 1) of a non-empty (N, C, H, W) float ``x`` as a new
    array (the caller may write to it): the separable window sum over the counted cells."""
    total = same_size_3x3_sum(x)
    total /= _same_size_divisor(*x.shape[2:], include_pads, x.dtype)
    return total


@functools.lru_cache(maxsize=64)
def _same_size_divisor(height: int, width: int, include_pads: bool, dtype: np.dtype) -> np.ndarray:
    """Each window's count of counted cells, (height, width), read-only: 9 with the pads
    counted; else 3 less one per image edge the window crosses, per axis."""
    def counts(size: int) -> np.ndarray:
        count = np.full(size, 3.0)
        if not include_pads:
            count[0] -= 1
            count[-1] -= 1  # a single cell: 1
        return count

    divisor = np.outer(counts(height), counts(width)).astype(dtype)
    divisor.flags.writeable = False
    return divisor
