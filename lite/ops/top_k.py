"""TopK: the ``k`` largest (or smallest) elements along an axis, and their int64 indices.
https://onnx.ai/onnx/operators/onnx__TopK.html

``k`` is an attribute in opset 1 and a one-element input from opset 10; opset 11 adds
``largest`` and ``sorted``. Equal values keep index order (the lower index first), as the spec
requires; results are always sorted, which ``sorted=0`` allows.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis, scalar_int
from lite.ops.registry import kernel


def _top_k(X, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X)
    axis = normalize_axis("TopK", axis, X.ndim)
    dimension = X.shape[axis]
    if not 0 <= k <= dimension:
        raise KernelError(f"TopK: k={k} is outside [0, {dimension}] for axis {axis} of shape {X.shape}")
    if largest:
        # A stable ascending sort of the reversed axis, read backwards, is descending with
        # equal values in increasing original index.
        order = np.flip(np.argsort(np.flip(X, axis=axis), axis=axis, kind="stable"), axis=axis)
        order = (dimension - 1) - order
    else:
        order = np.argsort(X, axis=axis, kind="stable")
    window = [slice(None)] * X.ndim
    window[axis] = slice(0, k)
    indices = order[tuple(window)].astype(np.int64, copy=False)
    return np.take_along_axis(X, indices, axis=axis), indices


@kernel("TopK", since=10)
def TopK(X, K, *, axis=-1, largest=1, sorted=1):
    return _top_k(X, scalar_int("TopK", "K", K), axis, largest)


@kernel("TopK", since=1)
def TopK_v1(X, *, k=None, axis=-1):
    if k is None:
        raise KernelError("TopK: opset-1 TopK needs the 'k' attribute")
    return _top_k(X, k, axis, largest=1)
