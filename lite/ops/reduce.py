"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.

Specs: https://onnx.ai/onnx/operators/onnx__ReduceSum.html (and onnx__ReduceMean.html, ...).

- before opset 13 (ReduceSum) or 18 (the others) ``axes`` is an attribute; absent means all
  axes;
- from then on ``axes`` is an optional int64 input, and ``noop_with_empty_axes=1`` makes an
  absent or empty ``axes`` reduce over no axis instead of all of them (the elementwise part
  of composite reductions, e.g. the square of ReduceSumSquare, still applies).

The result keeps the input's element type (integer sums accumulate in that type, as ONNX
Runtime does). Reducing an empty set gives the identity of the operation: 0 for sums, 1 for
products, the lowest value for max, -inf for log-sum-exp.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from lite.ops._helpers import einsum, highest, int_list, lowest, normalize_axes
from lite.ops._layout import channels_last_order, is_channels_last
from lite.ops.registry import kernel

# (data, axes tuple, keepdims) -> reduced array
Reducer = Callable[[np.ndarray, tuple, bool], np.ndarray]


def _sum(x, axes, keepdims):
    if x.dtype in _BLAS_TYPES and axes:
        ordered = tuple(sorted(axes))  # exporters write [-1, -2] as often as [2, 3]
        if x.flags.c_contiguous and ordered == tuple(range(x.ndim - len(axes), x.ndim)):
            return _sum_trailing(x, len(axes), keepdims)
        if ordered == tuple(range(2, x.ndim)) and is_channels_last(x) and x.size:
            return _sum_spatial_channels_last(x, keepdims)
        if (x.flags.c_contiguous and ordered == tuple(range(ordered[0], ordered[-1] + 1)) and x.size
                and 1 < math.prod(x.shape[ordered[-1] + 1 :]) <= _INNER_AXES_SIZE):
            return _sum_inner(x, ordered, keepdims)
    # The ufunc's reduce, not np.sum's wrapper: global pools of small maps are mostly overhead.
    return np.add.reduce(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _sum_trailing(x, count, keepdims):
    """The sum over the last ``count`` axes of a C-contiguous float array: rows of a matrix
    times a vector of ones. add.reduce runs its inner loop once per short row (a global pool
    of a 2x2 map with 1280 channels took 27 µs; the product takes 3)."""
    kept = x.shape[: x.ndim - count]
    length = math.prod(x.shape[x.ndim - count :])
    if length == 0 or x.size == 0:
        return np.add.reduce(x, axis=tuple(range(x.ndim - count, x.ndim)), keepdims=keepdims, dtype=x.dtype)
    total = np.matmul(x.reshape(-1, length), ones(length, x.dtype))
    return total.reshape(kept + (1,) * count if keepdims else kept)


# Up to this many values after the summed axes, einsum beats add.reduce (see _sum_inner); with
# one, the axes are the innermost and add.reduce sums them pairwise.
_INNER_AXES_SIZE = 1024


def _sum_inner(x, axes, keepdims):
    """The sum over consecutive axes of a C-contiguous float array followed by a few more values
    (FocalNet's mean over the rows of a (1, 64, 8, 8) map): einsum over the array as (before,
    summed, after). add.reduce runs its inner loop once per short run of values (15 against 6 µs
    there); einsum adds the same values in the same order."""
    before = math.prod(x.shape[: axes[0]])
    after = math.prod(x.shape[axes[-1] + 1 :])
    total = einsum("arb->ab", x.reshape(before, -1, after))
    if keepdims:
        shape = tuple(1 if axis in axes else size for axis, size in enumerate(x.shape))
    else:
        shape = tuple(size for axis, size in enumerate(x.shape) if axis not in axes)
    return total.reshape(shape)


def _sum_spatial_channels_last(x, keepdims):
    """The sum over the spatial axes of a channels-last ``(N, C, *spatial)`` array (see
    lite.ops._layout), each image's ``(pixels, C)`` rows summed by a vector of ones."""
    batch, channels = x.shape[:2]
    pixels = x.size // (batch * channels)
    rows = x.transpose(channels_last_order(x.ndim)).reshape(batch, pixels, channels)
    total = np.matmul(ones(pixels, x.dtype), rows)
    return total.reshape((batch, channels) + (1,) * (x.ndim - 2) if keepdims else (batch, channels))


@functools.lru_cache(maxsize=64)
def ones(length: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of ``length`` ones (sums of rows as products with it), kept per size."""
    ones = np.ones(length, dtype)
    ones.flags.writeable = False
    return ones


def _mean(x, axes, keepdims):
    count = math.prod(x.shape[axis] for axis in axes)
    total = _sum(x, axes, keepdims)
    if count == 0:
        # The mean of an empty set is NaN (0 / 0).
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.divide(total, count)
    if isinstance(total, np.ndarray) and total.dtype.kind == "f":
        return np.divide(total, total.dtype.type(count), out=total)
    return np.divide(total, count)


def _max(x, axes, keepdims):
    return np.max(x, axis=axes, keepdims=keepdims, initial=lowest(x.dtype))


def _min(x, axes, keepdims):
    return np.min(x, axis=axes, keepdims=keepdims, initial=highest(x.dtype))


def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _l1(x, axes, keepdims):
    return _sum(np.abs(x), axes, keepdims)


def _l2(x, axes, keepdims):
    return np.sqrt(_sum(x * x, axes, keepdims))


def _log_sum(x, axes, keepdims):
    with np.errstate(divide="ignore"):
        return np.log(_sum(x, axes, keepdims))


def _log_sum_exp(x, axes, keepdims):
    peak = _max(x, axes, True)
    # An infinite (or empty-set) peak would make x - peak NaN; shift by 0 there instead.
    peak = np.where(np.isfinite(peak), peak, 0).astype(x.dtype)
    with np.errstate(divide="ignore"):
        total = np.log(_sum(np.exp(x - peak), axes, True)) + peak
    return total if keepdims else np.squeeze(total, axis=axes)


def _sum_square(x, axes, keepdims):
    return _sum(x * x, axes, keepdims)


def _reduce(op_type: str, reducer: Reducer, data, axes, keepdims, noop_with_empty_axes=0):
    data = np.asarray(data)
    axes = axes.tolist() if isinstance(axes, np.ndarray) and axes.ndim == 1 and axes.dtype.kind == "i" else int_list(axes)
    if not axes:
        # Reducing over no axes still applies the elementwise steps: ReduceSumSquare squares,
        # ReduceLogSum takes the log, ReduceL1 the absolute value.
        axes = () if noop_with_empty_axes else range(data.ndim)
    axes = normalize_axes(op_type, axes, data.ndim)
    if data.dtype == np.float16 and reducer not in _EXACT:
        # Accumulated in float32 and rounded once, as ONNX Runtime does on CPUs: a float16 sum
        # rounds at every addition (and sums along an outer axis one value at a time).
        result = reducer(data.astype(np.float32), axes, bool(keepdims))
    else:
        result = reducer(data, axes, bool(keepdims))
    return np.asarray(result).astype(data.dtype, copy=False)


# Reductions whose result is one of the values: no rounding to keep from accumulating.
_EXACT = (_max, _min)


# --- axes as an input (ReduceSum from opset 13, the others from 18) ----------------------------


@kernel("ReduceSum", since=13)
def ReduceSum(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceSum", _sum, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMean", since=18)
def ReduceMean(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    if (type(data) is np.ndarray and type(axes) is np.ndarray and data.dtype in _BLAS_TYPES
            and data.flags.c_contiguous and data.size and axes.dtype.kind == "i" and axes.ndim == 1):
        count = _trailing_axes(axes.tobytes(), axes.dtype, data.ndim)
        if count:
            # Over trailing axes (RMSNorm as exported: Pow, ReduceMean over the last axis, ...;
            # a CNN's global average pool over the last two): what _mean computes, without the
            # general path's axis handling (most of a small call).
            kept = data.shape[: data.ndim - count]
            length = data.size // math.prod(kept)
            total = np.matmul(data.reshape(-1, length), ones(length, data.dtype))
            np.divide(total, data.dtype.type(length), out=total)
            return total.reshape(kept + (1,) * count if keepdims else kept)
        shape = _without_unit_axes(axes.tobytes(), axes.dtype, data.shape, bool(keepdims))
        if shape is not None:
            # Every named axis has length 1 (LeViT's mean over its one remaining token): the mean of
            # one value is that value, copied out (the general path's axis handling took 12 µs).
            return data.reshape(shape).copy()
    return _reduce("ReduceMean", _mean, data, axes, keepdims, noop_with_empty_axes)


@functools.lru_cache(maxsize=64)
def _without_unit_axes(axes: bytes, dtype: np.dtype, shape: tuple[int, ...], keepdims: bool) -> tuple[int, ...] | None:
    """The result's shape when the axes input (its bytes) names axes of ``shape`` that all have
    length 1, each once; None when it names others, none, one twice or one out of range."""
    rank = len(shape)
    named = np.frombuffer(axes, dtype).tolist()
    if not named or not all(-rank <= axis < rank for axis in named):
        return None
    named = {axis + rank if axis < 0 else axis for axis in named}
    if len(named) != len(np.frombuffer(axes, dtype)) or any(shape[axis] != 1 for axis in named):
        return None
    return shape if keepdims else tuple(size for axis, size in enumerate(shape) if axis not in named)


@functools.lru_cache(maxsize=64)
def _trailing_axes(axes: bytes, dtype: np.dtype, rank: int) -> int:
    """How many trailing axes of a rank-``rank`` array the axes input (its bytes) names, each
    once; 0 when it names others, none or one twice."""
    named = sorted(axis + rank if axis < 0 else axis for axis in np.frombuffer(axes, dtype).tolist())
    return len(named) if named and named == list(range(rank - len(named), rank)) else 0


@kernel("ReduceMax", since=18)
def ReduceMax(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceMax", _max, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMin", since=18)
def ReduceMin(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceMin", _min, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceProd", since=18)
def ReduceProd(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceProd", _prod, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceL1", since=18)
def ReduceL1(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceL1", _l1, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceL2", since=18)
def ReduceL2(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceL2", _l2, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceLogSum", since=18)
def ReduceLogSum(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceLogSum", _log_sum, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceLogSumExp", since=18)
def ReduceLogSumExp(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceLogSumExp", _log_sum_exp, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceSumSquare", since=18)
def ReduceSumSquare(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceSumSquare", _sum_square, data, axes, keepdims, noop_with_empty_axes)


# --- axes as an attribute ----------------------------------------------------------------------


@kernel("ReduceSum", since=1)
def ReduceSum_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceSum", _sum, data, axes, keepdims)


@kernel("ReduceMean", since=1)
def ReduceMean_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceMean", _mean, data, axes, keepdims)


@kernel("ReduceMax", since=1)
def ReduceMax_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceMax", _max, data, axes, keepdims)


@kernel("ReduceMin", since=1)
def ReduceMin_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceMin", _min, data, axes, keepdims)


@kernel("ReduceProd", since=1)
def ReduceProd_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceProd", _prod, data, axes, keepdims)


@kernel("ReduceL1", since=1)
def ReduceL1_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceL1", _l1, data, axes, keepdims)


@kernel("ReduceL2", since=1)
def ReduceL2_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceL2", _l2, data, axes, keepdims)


@kernel("ReduceLogSum", since=1)
def ReduceLogSum_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceLogSum", _log_sum, data, axes, keepdims)


@kernel("ReduceLogSumExp", since=1)
def ReduceLogSumExp_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceLogSumExp", _log_sum_exp, data, axes, keepdims)


@kernel("ReduceSumSquare", since=1)
def ReduceSumSquare_v1(data, *, axes=None, keepdims=1):
    return _reduce("ReduceSumSquare", _sum_square, data, axes, keepdims)
