"""LRN: local response normalization across neighbouring channels.

https://onnx.ai/onnx/operators/onnx__LRN.html

y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]) ^ beta
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops._conv_common import compute_dtype
from lite.ops.registry import kernel


@kernel("LRN", since=1)
def LRN(X, *, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    dtype = compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    channels = x.shape[1]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    squares = x * x
    # Prefix sums over channels give every window's sum in one subtraction.
    prefix = np.concatenate([np.zeros_like(squares[:, :1]), np.cumsum(squares, axis=1)], axis=1)
    upper = np.minimum(np.arange(channels) + after + 1, channels)
    lower = np.maximum(np.arange(channels) - before, 0)
    window = prefix[:, upper] - prefix[:, lower]
    y = x / (bias + (alpha / size) * window) ** beta
    return y.astype(X.dtype, copy=False)
