"""Expand: broadcast a tensor to a shape. https://onnx.ai/onnx/operators/onnx__Expand.html

The broadcast is bidirectional: the output shape is the numpy broadcast of the input's shape
and ``shape`` (so a 1 in ``shape`` keeps the input's dimension).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import broadcast_shape, int_list
from lite.ops.registry import kernel


@kernel("Expand", since=8)
def Expand(input, shape):
    input = np.asarray(input)
    try:
        target = broadcast_shape(input.shape, tuple(int_list(shape)))
    except ValueError as err:
        raise KernelError(
            f"Expand: input shape {input.shape} does not broadcast to {int_list(shape)}"
        ) from err
    # Copy: a broadcast view has zero strides and is read-only, a surprise for a graph output.
    return np.broadcast_to(input, target).copy()
