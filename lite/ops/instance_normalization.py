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
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    y = (x - mean) / np.sqrt(var + epsilon)
    y = y * np.asarray(scale, dtype=dtype).reshape(shape) + np.asarray(B, dtype=dtype).reshape(shape)
    return y.astype(input.dtype, copy=False)
