"""ScatterElements (and the deprecated Scatter): write ``updates`` into a copy of ``data``.

Specs: https://onnx.ai/onnx/operators/onnx__ScatterElements.html, onnx__Scatter.html.

For every position ``p`` of ``updates``, the output at ``p`` with its ``axis`` coordinate
replaced by ``indices[p]`` receives ``updates[p]``. ``reduction`` (opset 16: ``add``, ``mul``;
opset 18: ``max``, ``min``) combines instead of overwriting, repeated indices included. With
``none`` and repeated indices the spec leaves the winner undefined.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops._helpers import normalize_axis
from lite.ops.gather import checked_indices
from lite.ops.registry import kernel

# Unbuffered in-place reductions: each repeated index contributes.
REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter_into(
    op_type: str, output: np.ndarray, address: tuple, updates: np.ndarray, reduction: str
) -> None:
    """``output[address] (reduction)= updates`` in place; ``output`` is the kernel's own copy."""
    if reduction == "none":
        output[address] = updates
    elif reduction in REDUCTIONS:
        REDUCTIONS[reduction].at(output, address, updates)
    else:
        raise UnsupportedOpError(
            f"{op_type}: reduction must be one of none, add, mul, max, min, got {reduction!r}"
        )


@kernel("ScatterElements", since=11)
def ScatterElements(data, indices, updates, *, axis=0, reduction="none"):
    data = np.asarray(data)
    indices = np.asarray(indices)
    updates = np.asarray(updates)
    axis = normalize_axis("ScatterElements", axis, data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise KernelError(
            f"ScatterElements: indices {indices.shape} and updates {updates.shape} must share "
            f"one shape of the rank of data {data.shape}"
        )
    address = list(np.indices(indices.shape, sparse=True))
    address[axis] = checked_indices("ScatterElements", indices, data.shape[axis])
    output = data.copy()
    scatter_into("ScatterElements", output, tuple(address), updates, reduction)
    return output


@kernel("Scatter", since=9)
def Scatter(data, indices, updates, *, axis=0):
    return ScatterElements(data, indices, updates, axis=axis)
