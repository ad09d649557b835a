"""Global pools: one value per (N, C) over all spatial axes, keeping them as size-1 axes.

https://onnx.ai/onnx/operators/onnx__GlobalAveragePool.html
https://onnx.ai/onnx/operators/onnx__GlobalMaxPool.html
https://onnx.ai/onnx/operators/onnx__GlobalLpPool.html
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops.registry import kernel


def _spatial_axes(X) -> tuple[int, ...]:
    return tuple(range(2, np.ndim(X)))


_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


@kernel("GlobalAveragePool", since=1)
def GlobalAveragePool(X):
    x = np.asarray(X)
    if x.dtype == np.float16 and x.ndim > 2 and x.size:
        # Summed in float32 (by BLAS) and rounded once, as ONNX Runtime does on CPUs.
        return GlobalAveragePool(x.astype(np.float32)).astype(np.float16)
    if x.dtype in _BLAS_TYPES and x.ndim > 2 and x.flags.c_contiguous and x.size:
        # Each (n, c) plane's sum as a product with ones, then one division: numpy's mean runs its
        # reduction loop once per plane, which on a small map costs far more than the adds (a
        # 1280-channel 2x2 map: 59 µs against 5).
        from lite.ops.reduce import ones  # another kernels module: loaded when a model pools

        pixels = x.size // (x.shape[0] * x.shape[1])
        total = np.matmul(x.reshape(-1, pixels), ones(pixels, x.dtype))
        np.divide(total, x.dtype.type(pixels), out=total)
        return total.reshape(x.shape[:2] + (1,) * (x.ndim - 2))
    # The pixel count spelled out: numpy cannot infer -1 for a batch of 0.
    flat = x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),)).astype(compute_dtype(x), copy=False)
    mean = flat.mean(axis=-1)
    return mean.reshape(mean.shape + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)


@kernel("GlobalMaxPool", since=1)
def GlobalMaxPool(X):
    return np.max(X, axis=_spatial_axes(X), keepdims=True)


@kernel("GlobalLpPool", since=1)
def GlobalLpPool(X, *, p=2):
    x = np.abs(np.asarray(X, dtype=compute_dtype(X)))
    total = np.sum(x**p, axis=_spatial_axes(X), keepdims=True)
    return (total ** (1.0 / p)).astype(X.dtype, copy=False)
