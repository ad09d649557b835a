"""LpPool: the p-norm of each window, ``(sum |x|^p) ^ (1/p)``, pads contributing zero.

https://onnx.ai/onnx/operators/onnx__LpPool.html (ceil_mode and dilations from opset 18).
"""

from __future__ import annotations

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops._pool_common import pool_geometry
from lite.ops.registry import kernel


@kernel("LpPool", since=1)
def LpPool(
    X,
    *,
    auto_pad="NOTSET",
    ceil_mode=0,
    dilations=None,
    kernel_shape=None,
    p=2,
    pads=None,
    strides=None,
):
    geometry = pool_geometry(
        "LpPool",
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
    powered = np.abs(np.asarray(X, dtype=dtype)) ** p
    plan = geometry.tap_plan(powered, 0)
    regions = plan.regions()
    total = np.array(next(regions))
    for region in regions:
        total += region
    total = np.ascontiguousarray(plan.crop(total))
    return (total ** (1.0 / p)).astype(X.dtype, copy=False)
