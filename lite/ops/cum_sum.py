"""CumSum: cumulative sum along one axis. https://onnx.ai/onnx/operators/onnx__CumSum.html

``exclusive=1`` leaves the current element out (the first output is 0); ``reverse=1`` sums
from the end. The sum accumulates in the input's element type.
"""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import normalize_axis, scalar_int
from lite.ops.registry import kernel


@kernel("CumSum", since=11)
def CumSum(x, axis, *, exclusive=0, reverse=0):
    x = np.asarray(x)
    axis = normalize_axis("CumSum", scalar_int("CumSum", "axis", axis), x.ndim)
    values = np.flip(x, axis=axis) if reverse else x
    if exclusive:
        # Shift by one: the running sum of everything before each position.
        leading = [slice(None)] * x.ndim
        leading[axis] = slice(0, x.shape[axis] - 1)
        zeros_shape = list(x.shape)
        zeros_shape[axis] = min(1, x.shape[axis])
        values = np.concatenate([np.zeros(zeros_shape, dtype=x.dtype), values[tuple(leading)]], axis=axis)
    result = np.cumsum(values, axis=axis, dtype=x.dtype)
    return np.flip(result, axis=axis) if reverse else result
