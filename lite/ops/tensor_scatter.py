"""TensorScatter: write an update into a fixed-size cache along its sequence axis.

https://onnx.ai/onnx/operators/onnx__TensorScatter.html

``present = past`` except, for each batch ``b`` and update position ``s``, position
``write_indices[b] + s`` of the sequence ``axis`` (modulo its length when ``mode`` is
``circular``) takes ``update[b, ..., s, ...]``. ``write_indices`` defaults to zeros.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


@kernel("TensorScatter", since=24)
def TensorScatter(past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    past_cache, update = np.asarray(past_cache), np.asarray(update)
    axis = normalize_axis("TensorScatter", axis, past_cache.ndim)
    if axis == 0:
        raise KernelError("TensorScatter: axis cannot be 0, the batch axis")
    if mode not in ("linear", "circular"):
        raise KernelError(f"TensorScatter: mode must be 'linear' or 'circular', got {mode!r}")
    capacity, length = past_cache.shape[axis], update.shape[axis]
    batch = past_cache.shape[0]
    starts = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices, np.int64).reshape(-1)
    if starts.shape[0] != batch:
        raise KernelError(f"TensorScatter: write_indices needs {batch} values, got {starts.shape[0]}")
    present = past_cache.copy()
    for b in range(batch):
        positions = starts[b] + np.arange(length)
        if mode == "circular":
            positions %= capacity
        elif positions.size and (starts[b] < 0 or positions[-1] >= capacity):
            raise KernelError(
                f"TensorScatter: batch {b} writes positions {starts[b]}..{positions[-1]} past the cache length {capacity}"
            )
        # Move the sequence axis next to the batch axis so the write is one fancy-index assignment.
        target = np.moveaxis(present[b], axis - 1, 0)
        target[positions] = np.moveaxis(update[b], axis - 1, 0)
    return present
