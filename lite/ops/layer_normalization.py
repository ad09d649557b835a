"""LayerNormalization: normalize over the axes from ``axis`` on, then scale and shift.

https://onnx.ai/onnx/operators/onnx__LayerNormalization.html

Statistics are computed in the ``stash_type`` precision (1 = float32); the optional Mean and
InvStdDev outputs keep the normalized axes as size 1.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._helpers import einsum
from lite.ops.registry import kernel

_STASH_TYPES = {1: np.float32, 11: np.float64}


@kernel("LayerNormalization", since=17)
def LayerNormalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1, output_count=3):
    if stash_type not in _STASH_TYPES:
        raise UnsupportedOpError(
            f"LayerNormalization: stash_type {stash_type} is not supported (expected 1 float32 or 11 double)"
        )
    if (output_count == 1 and type(X) is np.ndarray and X.dtype == np.float32 and stash_type == 1
            and (axis == -1 or axis == X.ndim - 1) and X.ndim and X.size and X.flags.c_contiguous):
        y = normalize_last_axis(X, Scale, B, epsilon)
        if y is not None:
            return y
    stash = np.dtype(_STASH_TYPES[stash_type])
    x = np.asarray(X).astype(stash, copy=False)
    axis = axis + x.ndim if axis < 0 else axis
    if 0 <= axis < x.ndim and x.size:
        rows = _as_rows(x, axis, Scale, B)
        if rows is not None:
            return _normalize_rows(x, rows, axis, Scale, B, stash.type(epsilon), np.asarray(X).dtype, output_count)
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + stash.type(epsilon))
    y = centered * inv_std * np.asarray(Scale).astype(stash)
    if B is not None:
        y = y + np.asarray(B).astype(stash)
    return y.astype(X.dtype, copy=False), mean.astype(stash), inv_std.astype(stash)


def normalize_last_axis(x: np.ndarray, Scale, B, epsilon: float, overwrite: bool = False) -> np.ndarray | None:
    """Y of a C-contiguous float32 ``x`` normalized over its last axis, for Scale and B (or
    None) float32 vectors of that width; None for other parameters (the general path takes
    them). The statistics of :func:`_normalize_rows` in fewer numpy calls, each over operands
    of one shape where it can: a small transformer's 16x64 rows cost a microsecond a call, and
    their arithmetic a tenth of that. The standard deviation divides the scale into a
    (rows, width) factor (one broadcast pass, where dividing the rows and then scaling them
    were two). ``overwrite``: ``x`` is a temporary of the caller's, which the result may
    reuse."""
    width = x.shape[-1]
    if (type(Scale) is not np.ndarray or Scale.dtype != np.float32 or Scale.shape != (width,)
            or (B is not None and (type(B) is not np.ndarray or B.dtype != np.float32 or B.shape != (width,)))):
        return None
    rows = x.reshape(-1, width)
    mean = np.matmul(rows, _mean_weights(width, rows.dtype))
    centered = np.subtract(rows, mean.reshape(-1, 1), out=rows if overwrite else None)
    variance = einsum("ij,ij->i", centered, centered)
    variance *= np.float32(1.0 / width)
    variance += np.float32(epsilon)
    deviation = np.sqrt(variance, out=variance).reshape(-1, 1)
    centered *= np.divide(Scale, deviation)
    if B is not None:
        centered += B
    return centered.reshape(x.shape)


def _as_rows(x: np.ndarray, axis: int, Scale, B) -> np.ndarray | None:
    """``x`` as a (rows, normalized size) matrix when Scale and B are whole rows: a view, or for
    a strided ``x`` (wav2vec2 normalizes a transposed convolution output) a contiguous copy,
    still cheaper than the general path's reductions over strided axes."""
    width = math.prod(x.shape[axis:])
    if np.size(Scale) != width or (B is not None and np.size(B) != width):
        return None
    return x.reshape(-1, width)


def _normalize_rows(x: np.ndarray, rows: np.ndarray, axis: int, Scale, B, epsilon, dtype, output_count: int = 3):
    """The same statistics as above, in fewer passes: small transformers run this kernel on
    16x64 tensors, where each numpy call's overhead outweighs its arithmetic. Row means are
    products with a vector of 1/width: numpy reduces a short row at a time (wav2vec2's 799 rows
    of 32 channels), a matrix-vector product runs over them all at once. With one output (Y
    alone, as exporters write it), the statistics are neither reshaped nor returned."""
    width = rows.shape[1]
    stash = rows.dtype
    mean = np.matmul(rows, _mean_weights(width, stash))
    centered = np.subtract(rows, mean[:, None])
    variance = einsum("ij,ij->i", centered, centered)
    variance *= stash.type(1.0 / width)
    variance += epsilon
    inv_std = np.sqrt(variance, out=variance)
    np.reciprocal(inv_std, out=inv_std)
    centered *= inv_std[:, None]
    centered *= _row(Scale, stash, width)
    if B is not None:
        centered += _row(B, stash, width)
    y = centered.reshape(x.shape)
    if y.dtype != dtype:
        y = y.astype(dtype)
    if output_count == 1:
        return y
    statistics = x.shape[:axis] + (1,) * (x.ndim - axis)
    return y, mean.reshape(statistics), inv_std.reshape(statistics)


def _row(value, stash: np.dtype, width: int) -> np.ndarray:
    """Scale or B as a row of ``width`` in the stash type (itself when it already is one)."""
    if type(value) is np.ndarray and value.dtype == stash and value.shape == (width,):
        return value
    return np.asarray(value).astype(stash, copy=False).reshape(width)


@functools.lru_cache(maxsize=64)
def _mean_weights(width: int, dtype: np.dtype) -> np.ndarray:
    weights = np.full(width, 1.0 / width, dtype)
    weights.flags.writeable = False
    return weights
