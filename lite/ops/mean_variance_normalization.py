"""MeanVarianceNormalization: (X - mean) / std over ``axes``.

https://onnx.ai/onnx/operators/onnx__MeanVarianceNormalization.html
"""

from __future__ import annotations

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops.registry import kernel


@kernel("MeanVarianceNormalization", since=9)
def MeanVarianceNormalization(X, *, axes=(0, 2, 3)):
    dtype = compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    axes = tuple(int(a) for a in axes)
    mean = x.mean(axis=axes, keepdims=True)
    variance = np.mean(x * x, axis=axes, keepdims=True) - mean * mean
    y = (x - mean) / np.sqrt(np.maximum(variance, 0))
    return y.astype(X.dtype, copy=False)
