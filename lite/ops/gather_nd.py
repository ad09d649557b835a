"""GatherND: gather slices of ``data`` addressed by index tuples.
https://onnx.ai/onnx/operators/onnx__GatherND.html

The last dimension of ``indices`` (length ``k``) holds an index into the first ``k`` axes of
``data`` after the ``batch_dims`` leading axes, which ``data`` and ``indices`` share (opset 12).
Output shape: ``indices.shape[:-1] + data.shape[batch_dims + k:]``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import ReadOnlyInputs
from lite.ops.gather import checked_indices
from lite.ops.registry import kernel


@kernel("GatherND", since=11)
def GatherND(data, indices, *, batch_dims=0):
    data = np.asarray(data)
    indices = np.asarray(indices).astype(np.int64, copy=False)
    depth = indices.shape[-1]
    if batch_dims + depth > data.ndim or data.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise KernelError(
            f"GatherND: indices of shape {indices.shape} do not address data of shape "
            f"{data.shape} with batch_dims={batch_dims}"
        )
    if batch_dims == 0 and depth and indices.size:
        fast = _gather_flat(data, indices, depth)
        if fast is not None:
            return fast
    batch_shape = data.shape[:batch_dims]
    batches = int(np.prod(batch_shape, dtype=np.int64))
    flat_data = data.reshape((batches,) + data.shape[batch_dims:])
    flat_indices = indices.reshape(batches, -1, depth)
    addresses = [np.arange(batches)[:, None]]
    for position in range(depth):
        dimension = flat_data.shape[1 + position]
        addresses.append(checked_indices("GatherND", flat_indices[..., position], dimension))
    gathered = flat_data[tuple(addresses)]
    return gathered.reshape(indices.shape[:-1] + data.shape[batch_dims + depth :])


# Flat positions of constant index tuples (an attention mask's, from the sequence length), per data shape.
_POSITIONS = ReadOnlyInputs()


def _gather_flat(data: np.ndarray, indices: np.ndarray, depth: int) -> np.ndarray | None:
    """The common case in one take: every index tuple as one flat position into the first
    ``depth`` axes (numpy checks the range; None when it refuses, for the path above to name
    the offending indices). The general path's per-axis checks and fancy indexing took 33 µs of
    a small BERT's attention-mask GatherND."""
    dimensions = data.shape[:depth]
    key = _POSITIONS.key(dimensions, (indices,))
    flat = None if key is None else _POSITIONS.get(key, (indices,))
    if flat is None:
        tuples = indices.reshape(-1, depth)
        if tuples.min() < 0:
            tuples = np.where(tuples < 0, tuples + np.asarray(dimensions, np.int64), tuples)
        try:
            flat = np.ravel_multi_index(tuple(tuples.T), dimensions)
        except ValueError:
            return None
        if key is not None:
            _POSITIONS.put(key, (indices,), flat)
    gathered = np.take(data.reshape((-1,) + data.shape[depth:]), flat, axis=0)
    return gathered.reshape(indices.shape[:-1] + data.shape[depth:])
