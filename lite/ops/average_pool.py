"""AveragePool: the mean of each window; pads count only with ``count_include_pad=1``.

https://onnx.ai/onnx/operators/onnx__AveragePool.html

Cells a ``ceil_mode`` window reaches past the padded input never count. The denominator is
separable over the spatial axes, so it is an outer product of 1-D counts.
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops._pool_common import pool_geometry, tile_sum
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
    dtype = compute_dtype(X)
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
