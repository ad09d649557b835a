"""LpPool: the p-norm of each window, ``(sum |x|^p) ^ (1/p)``, pads contributing zero.

https://onnx.ai/onnx/operators/onnx__LpPool.html (ceil_mode and dilations from opset 18).
"""

from __future__ import annotations

import numpy as np

from lite.ops._conv_common import compute_dtype, pad_input
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
    dtype = compute_dtype(X)
    end = [e + extra for e, extra in zip(geometry.end, geometry.overhang)]
    powered = np.abs(np.asarray(X, dtype=dtype)) ** p
    padded = pad_input(powered, geometry.begin, end, 0.0)
    lead = (slice(None), slice(None))
    taps = geometry.taps()
    total = np.array(padded[lead + taps[0]])
    for tap in taps[1:]:
        total += padded[lead + tap]
    return (total ** (1.0 / p)).astype(X.dtype, copy=False)
