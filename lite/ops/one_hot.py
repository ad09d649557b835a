"""OneHot: expand indices into one-hot vectors. https://onnx.ai/onnx/operators/onnx__OneHot.html

A new axis of length ``depth`` is inserted at ``axis``; it holds ``values[1]`` (on) where its
position equals the index and ``values[0]`` (off) elsewhere. Indices outside the valid range
give all-off vectors. The valid range is ``[0, depth)`` in opset 9 and ``[-depth, depth)`` from
opset 11, negative indices counting from the end.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


def _one_hot(indices, depth, values, axis: int, allow_negative: bool) -> np.ndarray:
    indices = np.asarray(indices)
    depth_array = np.asarray(depth)
    if depth_array.size != 1:
        raise KernelError(f"OneHot: depth must hold one value, got shape {depth_array.shape}")
    length = int(depth_array.reshape(()))
    values = np.asarray(values).reshape(-1)
    if values.size != 2:
        raise KernelError(f"OneHot: values must hold [off, on], got {values.size} elements")
    rank = indices.ndim + 1
    axis = normalize_axis("OneHot", axis, rank)
    # Float indices are truncated toward zero, like a cast.
    whole = np.trunc(indices).astype(np.int64) if indices.dtype.kind == "f" else indices.astype(np.int64)
    if allow_negative:
        whole = np.where(whole < 0, whole + length, whole)
    positions = np.arange(length, dtype=np.int64).reshape([-1 if a == axis else 1 for a in range(rank)])
    hot = positions == np.expand_dims(whole, axis)
    return np.where(hot, values[1], values[0])


@kernel("OneHot", since=11)
def OneHot(indices, depth, values, *, axis=-1):
    return _one_hot(indices, depth, values, axis, allow_negative=True)


@kernel("OneHot", since=9)
def OneHot_v9(indices, depth, values, *, axis=-1):
    return _one_hot(indices, depth, values, axis, allow_negative=False)
