"""Concat: join tensors along one axis. https://onnx.ai/onnx/operators/onnx__Concat.html

``axis`` defaults to 1 in opset 1 and is required from opset 4.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


@kernel("Concat", since=4)
def Concat(*inputs, axis=None):
    if axis is None:
        raise KernelError("Concat: the 'axis' attribute is required")
    if not inputs:
        raise KernelError("Concat: expected at least one input, got none")
    arrays = [np.asarray(x) for x in inputs]
    axis = normalize_axis("Concat", axis, arrays[0].ndim)
    try:
        return np.concatenate(arrays, axis=axis)
    except ValueError as err:
        shapes = [a.shape for a in arrays]
        raise KernelError(f"Concat: inputs of shapes {shapes} cannot be joined on axis {axis}") from err


@kernel("Concat", since=1)
def Concat_v1(*inputs, axis=1):
    return Concat(*inputs, axis=axis)
