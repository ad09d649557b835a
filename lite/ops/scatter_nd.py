"""ScatterND: write slices of ``updates`` into a copy of ``data`` at index tuples.
https://onnx.ai/onnx/operators/onnx__ScatterND.html

``indices`` has shape ``[..., k]``; each index tuple addresses a slice of the first ``k`` axes of
``data``, and ``updates`` has shape ``indices.shape[:-1] + data.shape[k:]``. ``reduction``
(opset 16: ``add``, ``mul``; opset 18: ``max``, ``min``) combines instead of overwriting.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.gather import checked_indices
from lite.ops.registry import kernel
from lite.ops.scatter_elements import scatter_into


@kernel("ScatterND", since=11)
def ScatterND(data, indices, updates, *, reduction="none"):
    data = np.asarray(data)
    indices = np.asarray(indices)
    updates = np.asarray(updates)
    depth = indices.shape[-1]
    expected = indices.shape[:-1] + data.shape[depth:]
    if depth > data.ndim or updates.shape != expected:
        raise KernelError(
            f"ScatterND: for data {data.shape} and indices {indices.shape} updates must have "
            f"shape {expected}, got {updates.shape}"
        )
    address = tuple(
        checked_indices("ScatterND", indices[..., position], data.shape[position])
        for position in range(depth)
    )
    output = data.copy()
    scatter_into("ScatterND", output, address, updates, reduction)
    return output
