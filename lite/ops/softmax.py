"""Softmax, LogSoftmax and Hardmax.

Specs: https://onnx.ai/onnx/operators/onnx__Softmax.html, onnx__LogSoftmax.html,
onnx__Hardmax.html.

- opset 1 and 11: the input is coerced to 2-D ``[prod(shape[:axis]), prod(shape[axis:])]``
  (``axis`` defaults to 1) and normalized along the second dimension, i.e. over all the
  trailing axes together;
- opset 13 on: normalized along the single ``axis`` (default -1).

The maximum is subtracted before exponentiating, so large inputs do not overflow. Hardmax
marks the first maximum along the axis with 1 and everything else with 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if axis == x.ndim - 1 and x.dtype in _FLOATS and x.size:
        if x.shape[-1] == 1:
            return _softmax_single(x)
        if x.size > _FEW_ROWS * x.shape[-1]:
            fast = _softmax_rows(x)
            if fast is not None:
                return fast
    # The ufuncs' reductions and in-place updates, not np.max/np.sum and fresh arrays: attention
    # runs this on small score tensors, where each call's overhead outweighs its arithmetic.
    shifted = x - np.maximum.reduce(x, axis=axis, keepdims=True)
    np.exp(shifted, out=shifted)
    shifted /= np.add.reduce(shifted, axis=axis, keepdims=True)
    return shifted


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# Up to this many rows, each row is shifted by its own maximum (below): a reduction over so few
# rows costs no more than one over the whole tensor, and it leaves no row to check afterwards
# (the one-shift path's three reductions and checks cost more than its arithmetic on LeViT's and
# a small ViT's 4 to 32 rows of scores).
_FEW_ROWS = 32
# A row whose exponentials sum to less than this was shifted too far down (see _softmax_rows).
_SMALLEST_SUM = {np.dtype(np.float32): 1e-30, np.dtype(np.float64): 1e-290}


def softmax_last_axis(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of a non-empty float32 or float64 ``x``, as the kernel computes
    it (for the engine's attention fusion, which calls it on scores it computed itself)."""
    return _softmax(x, x.ndim - 1)


def _softmax_single(x: np.ndarray) -> np.ndarray:
    """Softmax over a last axis of length 1: ``exp(x - x)``, what the row-by-row path computes
    (the maximum and the sum of one element are the element; ``e / e`` is 1 for ``e = 1`` and
    NaN for NaN), in two ufunc calls: 1 where ``x`` is finite, NaN where it is not."""
    result = np.subtract(x, x)
    return np.exp(result, out=result)


def _softmax_rows(x: np.ndarray) -> np.ndarray | None:
    """Softmax over the last axis, shifted by the tensor's maximum instead of each row's (None
    when that does not work out). A row's maximum is a reduction over short rows, which numpy
    runs one row at a time (26 of a 12x49x49 attention softmax's 105 µs); the result does not
    depend on the shift, and one shift for all rows only needs every row to keep a sum of
    exponentials well inside the float range. Masked entries (-inf, the float minimum) still
    become exactly 0; a row shifted so far that its sum underflows, an infinite or NaN input,
    leaves it to the row-by-row path. The row sums are a product with ones (also faster than a
    reduction over short rows)."""
    peak = np.maximum.reduce(x, axis=None)
    if not math.isfinite(peak):
        return None
    shifted = np.subtract(x, peak)
    np.exp(shifted, out=shifted)
    rows = shifted.reshape(-1, x.shape[-1])
    sums = np.matmul(rows, _ones(x.shape[-1], x.dtype))
    if not np.minimum.reduce(sums) >= _SMALLEST_SUM[x.dtype]:
        return None
    np.divide(rows, sums[:, None], out=rows)
    return shifted


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(length, dtype)
    ones.flags.writeable = False
    return ones


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    winners = np.expand_dims(np.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    return (positions == winners).astype(x.dtype)


def _along_axis(op_type: str, function: Callable, input: np.ndarray, axis: int) -> np.ndarray:
    input = np.asarray(input)
    if input.size == 0:
        return input.copy()
    axis = normalize_axis(op_type, axis, input.ndim)
    return np.asarray(function(input, axis)).astype(input.dtype, copy=False)


def _coerced_2d(op_type: str, function: Callable, input: np.ndarray, axis: int) -> np.ndarray:
    input = np.asarray(input)
    if input.size == 0:
        return input.copy()
    # Coercion accepts axis == rank: every row then holds a single element.
    axis = input.ndim if axis == input.ndim else normalize_axis(op_type, axis, input.ndim)
    rows = int(np.prod(input.shape[:axis], dtype=np.int64))
    matrix = input.reshape(rows, -1)
    return np.asarray(function(matrix, 1)).astype(input.dtype, copy=False).reshape(input.shape)


@kernel("Softmax", since=13)
def Softmax(input, *, axis=-1):
    return _along_axis("Softmax", _softmax, input, axis)


@kernel("LogSoftmax", since=13)
def LogSoftmax(input, *, axis=-1):
    return _along_axis("LogSoftmax", _log_softmax, input, axis)


@kernel("Hardmax", since=13)
def Hardmax(input, *, axis=-1):
    return _along_axis("Hardmax", _hardmax, input, axis)


@kernel("Softmax", since=1)
def Softmax_v1(input, *, axis=1):
    return _coerced_2d("Softmax", _softmax, input, axis)


@kernel("LogSoftmax", since=1)
def LogSoftmax_v1(input, *, axis=1):
    return _coerced_2d("LogSoftmax", _log_softmax, input, axis)


@kernel("Hardmax", since=1)
def Hardmax_v1(input, *, axis=1):
    return _coerced_2d("Hardmax", _hardmax, input, axis)
