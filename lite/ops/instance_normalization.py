"""InstanceNormalization: normalize each (N, C) plane over its spatial axes, then scale and shift.

https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html
"""

from __future__ import annotations

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops.registry import kernel


@kernel("InstanceNormalization", since=1)
def InstanceNormalization(input, scale, B, *, epsilon=1e-5):
    dtype = compute_dtype(input)
    x = np.asarray(input, dtype=dtype)
    if x.ndim >= 3 and x.size:
        return _normalize_planes(x, scale, B, epsilon).astype(input.dtype, copy=False)
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    y = (x - mean) / np.sqrt(var + epsilon)
    y = y * np.asarray(scale, dtype=dtype).reshape(shape) + np.asarray(B, dtype=dtype).reshape(shape)
    return y.astype(input.dtype, copy=False)


def _normalize_planes(x: np.ndarray, scale, B, epsilon: float) -> np.ndarray:
    """The same as the general form in fewer numpy calls, each (n, c) plane a row: one reduction
    for the means, one for the variances, scale and shift folded into one multiply and one add
    (PoolFormer normalizes 4x4 maps, where numpy's per-call overhead is the cost)."""
    batch, channels = x.shape[:2]
    planes = np.ascontiguousarray(x).reshape(batch, channels, -1)
    inverse_width = x.dtype.type(1.0 / planes.shape[2])
    mean = np.add.reduce(planes, axis=2, keepdims=True)
    mean *= inverse_width
    centered = planes - mean
    variance = np.add.reduce(centered * centered, axis=2, keepdims=True)
    variance *= inverse_width
    variance += x.dtype.type(epsilon)
    np.sqrt(variance, out=variance)
    gain = np.divide(np.asarray(scale, dtype=x.dtype).reshape(channels, 1), variance, out=variance)
    centered *= gain
    centered += np.asarray(B, dtype=x.dtype).reshape(channels, 1)
    return centered.reshape(x.shape)
