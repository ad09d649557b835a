"""ArgMax and ArgMin: int64 index of the largest / smallest element along ``axis``.

Specs: https://onnx.ai/onnx/operators/onnx__ArgMax.html, onnx__ArgMin.html.

Ties go to the first occurrence, or the last with ``select_last_index=1`` (opset 12; earlier
opsets always take the first, which is this kernel's default).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


def _arg_extreme(op_type: str, find: Callable, data, axis: int, keepdims: int, select_last_index: int):
    data = np.asarray(data)
    axis = normalize_axis(op_type, axis, data.ndim)
    if select_last_index:
        # The first hit in the reversed tensor is the last hit in the original one.
        last = data.shape[axis] - 1
        indices = last - find(np.flip(data, axis=axis), axis=axis)
    else:
        indices = find(data, axis=axis)
    indices = np.asarray(indices, dtype=np.int64)
    return np.expand_dims(indices, axis) if keepdims else indices


@kernel("ArgMax", since=1)
def ArgMax(data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg_extreme("ArgMax", np.argmax, data, axis, keepdims, select_last_index)


@kernel("ArgMin", since=1)
def ArgMin(data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg_extreme("ArgMin", np.argmin, data, axis, keepdims, select_last_index)
