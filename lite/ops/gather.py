"""Gather and GatherElements: pick entries of ``data`` by index along one axis.

Specs: https://onnx.ai/onnx/operators/onnx__Gather.html, onnx__GatherElements.html.

Negative indices count from the end of the axis; an index outside ``[-dim, dim)`` is an error.
Gather's output shape is ``data.shape[:axis] + indices.shape + data.shape[axis + 1:]``;
GatherElements' output has the shape of ``indices`` (same rank as ``data``).
"""

from __future__ import annotations

import numpy as np

from lite.errors import InputValueError, KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


def checked_indices(op_type: str, indices, dimension: int) -> np.ndarray:
    """int64 indices with negatives wrapped; raises when any lies outside ``[-dim, dim)``."""
    indices = np.asarray(indices).astype(np.int64, copy=False)
    if indices.size and (indices.min() < -dimension or indices.max() >= dimension):
        raise InputValueError(
            f"{op_type}: indices must lie in [{-dimension}, {dimension - 1}], got values from "
            f"{indices.min()} to {indices.max()}"
        )
    return np.where(indices < 0, indices + dimension, indices)


@kernel("Gather", since=1)
def Gather(data, indices, *, axis=0):
    data = np.asarray(data)
    axis = normalize_axis("Gather", axis, data.ndim)
    indices = np.asarray(indices)
    if indices.dtype.kind in "iu":
        # numpy's take wraps negative indices and refuses the rest exactly as ONNX does; the
        # check below (three passes over the indices) only names what it refused.
        try:
            return np.asarray(np.take(data, indices, axis=axis))
        except (IndexError, TypeError):  # out of range, or uint64 indices numpy will not cast
            pass
    return np.take(data, checked_indices("Gather", indices, data.shape[axis]), axis=axis)


@kernel("GatherElements", since=11)
def GatherElements(data, indices, *, axis=0):
    data = np.asarray(data)
    indices = np.asarray(indices)
    axis = normalize_axis("GatherElements", axis, data.ndim)
    if indices.ndim != data.ndim:
        raise KernelError(f"GatherElements: indices of rank {indices.ndim} for data of rank {data.ndim}")
    # Off the gather axis, indices may be shorter than data: only the leading part is used.
    window = tuple(slice(None) if a == axis else slice(0, indices.shape[a]) for a in range(data.ndim))
    positions = checked_indices("GatherElements", indices, data.shape[axis])
    return np.take_along_axis(data[window], positions, axis=axis)
