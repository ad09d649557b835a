"""Reshape and Flatten: the same elements in a new shape.

Specs: https://onnx.ai/onnx/operators/onnx__Reshape.html, onnx__Flatten.html.

Reshape's target shape is an attribute in opset 1 and an int64 input from opset 5. In it, ``-1``
is inferred from the remaining elements and ``0`` copies the input's dimension at that
position, unless ``allowzero=1`` (opset 14), where ``0`` means a zero-sized dimension.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list, normalize_axis
from lite.ops.registry import kernel


def _target_shape(data: np.ndarray, shape: list[int], allowzero: int) -> list[int]:
    target = list(shape)
    if target.count(-1) > 1:
        raise KernelError(f"Reshape: at most one dimension may be -1, got shape {shape}")
    if allowzero and 0 in target and -1 in target:
        raise KernelError(f"Reshape: with allowzero=1 the shape {shape} cannot hold both 0 and -1")
    if not allowzero:
        for index, dimension in enumerate(target):
            if dimension == 0:
                if index >= data.ndim:
                    raise KernelError(
                        f"Reshape: shape {shape} copies dimension {index} (0) but the input "
                        f"has rank {data.ndim}"
                    )
                target[index] = data.shape[index]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        if known == 0 or data.size % known:
            raise KernelError(f"Reshape: cannot infer -1 in {shape} for an input of shape {data.shape}")
        target[target.index(-1)] = data.size // known
    if int(np.prod(target, dtype=np.int64)) != data.size or any(d < 0 for d in target):
        raise KernelError(f"Reshape: an input of shape {data.shape} cannot take the shape {shape}")
    return target


@kernel("Reshape", since=5)
def Reshape(data, shape, *, allowzero=0):
    data = np.asarray(data)
    target = shape.tolist() if isinstance(shape, np.ndarray) and shape.ndim == 1 else int_list(shape)
    if 0 not in target and (not target or min(target) >= -1):
        # numpy's reshape infers one -1 as ONNX does; a model runs many small Reshapes, so the
        # checks below run only to name what numpy refused.
        try:
            return data.reshape(target)
        except ValueError:
            pass
    return data.reshape(_target_shape(data, target, allowzero))


@kernel("Reshape", since=1)
def Reshape_v1(data, *, shape=None, consumed_inputs=None):
    if shape is None:
        raise KernelError("Reshape: opset-1 Reshape needs the 'shape' attribute")
    return Reshape(data, shape)


@kernel("Flatten", since=1)
def Flatten(input, *, axis=1):
    """Flatten to 2-D: dimensions before ``axis`` form the rows, the rest the columns."""
    input = np.asarray(input)
    # axis may equal the rank: the output is then [size, 1].
    axis = input.ndim if axis == input.ndim else normalize_axis("Flatten", axis, input.ndim)
    rows = int(np.prod(input.shape[:axis], dtype=np.int64))
    columns = int(np.prod(input.shape[axis:], dtype=np.int64))
    return input.reshape(rows, columns)
