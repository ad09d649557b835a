"""Compress: keep the slices along ``axis`` whose ``condition`` entry is true (the flattened
elements when ``axis`` is absent). https://onnx.ai/onnx/operators/onnx__Compress.html

``condition`` may be shorter than the axis; missing entries count as false.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


@kernel("Compress", since=9)
def Compress(input, condition, *, axis=None):
    input = np.asarray(input)
    condition = np.asarray(condition, dtype=np.bool_).reshape(-1)
    if axis is None:
        input = input.reshape(-1)
        axis = 0
    axis = normalize_axis("Compress", axis, input.ndim)
    if condition.size > input.shape[axis]:
        raise KernelError(
            f"Compress: condition has {condition.size} entries but axis {axis} has {input.shape[axis]}"
        )
    return np.compress(condition, input, axis=axis)
