"""CumProd: cumulative product along one axis. https://onnx.ai/onnx/operators/onnx__CumProd.html

``exclusive=1`` leaves the current element out (the first output is 1); ``reverse=1``
multiplies from the end. The product accumulates in the input's element type.
"""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import normalize_axis, scalar_int
from lite.ops.registry import kernel


@kernel("CumProd", since=26)
def CumProd(x, axis, *, exclusive=0, reverse=0):
    x = np.asarray(x)
    axis = normalize_axis("CumProd", scalar_int("CumProd", "axis", axis), x.ndim)
    values = np.flip(x, axis=axis) if reverse else x
    if exclusive:
        # Shift by one, filling with the multiplicative identity.
        leading = [slice(None)] * x.ndim
        leading[axis] = slice(0, x.shape[axis] - 1)
        ones_shape = list(x.shape)
        ones_shape[axis] = min(1, x.shape[axis])
        values = np.concatenate([np.ones(ones_shape, dtype=x.dtype), values[tuple(leading)]], axis=axis)
    result = np.cumprod(values, axis=axis, dtype=x.dtype)
    return np.flip(result, axis=axis) if reverse else result
