"""Expand: broadcast a tensor to a shape. https://onnx.ai/onnx/operators/onnx__Expand.html

The broadcast is bidirectional: the output shape is the numpy broadcast of the input's shape
and ``shape`` (so a 1 in ``shape`` keeps the input's dimension).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list
from lite.ops.registry import kernel


@kernel("Expand", since=8)
def Expand(input, shape):
    input = np.asarray(input)
    try:
        target = _broadcast(input.shape, tuple(int_list(shape)))
    except ValueError as err:
        raise KernelError(
            f"Expand: input shape {input.shape} does not broadcast to {int_list(shape)}"
        ) from err
    # Copy: a broadcast view has zero strides and is read-only, a surprise for a graph output.
    return np.broadcast_to(input, target).copy()


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes(a, b) without its cost (several µs, more than a small Expand)."""
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    elif len(b) < len(a):
        b = (1,) * (len(a) - len(b)) + b
    result = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{x} and {y} do not broadcast")
        result.append(y if x == 1 else x)
    return tuple(result)
