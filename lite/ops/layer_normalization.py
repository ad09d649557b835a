"""LayerNormalization: normalize over the axes from ``axis`` on, then scale and shift.

https://onnx.ai/onnx/operators/onnx__LayerNormalization.html

Statistics are computed in the ``stash_type`` precision (1 = float32); the optional Mean and
InvStdDev outputs keep the normalized axes as size 1.

Before opset 17 the op is ONNX Runtime's own, registered in the default domain from version 1
with the same inputs, attributes and outputs: its transformer optimizer writes it into models of
any opset, so the kernel serves those opsets too.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._helpers import einsum, full_operand_within
from lite.ops.registry import kernel
from lite.plan_cache import PlanCache

_STASH_TYPES = {1: np.float32, 11: np.float64}


@kernel("LayerNormalization", since=1)
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
    centered = last_axis_rows(rows, rows if overwrite else None, _mean_weights(width, rows.dtype),
                          np.float32(1.0 / width), np.float32(epsilon), Scale, B)
    return centered.reshape(x.shape)


def last_axis_rows(rows: np.ndarray, out: np.ndarray | None, mean_weights: np.ndarray, inverse_width: np.float32,
                   epsilon: np.float32, scale: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """normalize_last_axis's arithmetic on float32 ``rows`` (rows, width), into ``out`` (``rows``
    itself, or None for a new array): ``scale`` and ``bias`` are vectors or whole (rows, width)
    arrays of the same values; no ``scale`` divides by the deviation alone (a norm whose γ and β
    the readers took, lite.engines.numpy_layer_norm_fold)."""
    mean = np.matmul(rows, mean_weights)
    centered = np.subtract(rows, mean.reshape(-1, 1), out=out)
    variance = einsum("ij,ij->i", centered, centered)
    variance *= inverse_width
    variance += epsilon
    deviation = np.sqrt(variance, out=variance).reshape(-1, 1)
    if scale is None:
        return np.divide(centered, deviation, out=centered)
    centered *= np.divide(scale, deviation)
    if bias is not None:
        centered += bias
    return centered


class LastAxisNormalizer:
    """normalize_last_axis for one constant Scale and B (known by identity) with what depends
    on the input's shape worked out once per shape (a server sees a few sequence lengths):
    the same values, with Scale and B broadcast to whole rows (a ufunc over operands of one
    shape skips the broadcast's second loop: 1.4 against 0.6 µs for a 16x64 bias) and none of
    the per-call checks, which on a small transformer's 16x64 rows cost a third of the step."""

    def __init__(self, Scale: np.ndarray, B: np.ndarray | None, epsilon: float) -> None:
        self.scale = Scale
        self.bias = B
        self.epsilon = np.float32(epsilon)
        # x's shape -> (rows shape, mean weights, 1/width, Scale rows, B rows or None), or None
        # where the parameters do not fit it (the kernel's general path then).
        self.shapes: PlanCache[tuple[Any, ...] | None] = PlanCache()

    def __call__(self, x: np.ndarray, Scale: Any, B: Any, overwrite: bool = False) -> np.ndarray | None:
        """Y for a C-contiguous float32 ``x`` (overwritten where the caller says it may be), or
        None (other parameters than its own, or ones the last-axis path does not take)."""
        if Scale is not self.scale or B is not self.bias or not x.flags.c_contiguous:
            return None
        plan = self.shapes.get(x.shape, _UNPLANNED)
        if plan is _UNPLANNED:
            plan = self._plan(x.shape)
        if plan is None:
            return None
        rows, mean_weights, inverse_width, scale, bias = plan
        flat = x.reshape(rows)
        if overwrite:
            last_axis_rows(flat, flat, mean_weights, inverse_width, self.epsilon, scale, bias)
            return x
        return last_axis_rows(flat, None, mean_weights, inverse_width, self.epsilon, scale, bias).reshape(x.shape)

    def _plan(self, shape: tuple[int, ...]) -> tuple[Any, ...] | None:
        width, Scale, B = shape[-1] if shape else 0, self.scale, self.bias
        plan, nbytes = None, 0
        if (math.prod(shape) and type(Scale) is np.ndarray and Scale.dtype == np.float32 and Scale.shape == (width,)
                and (B is None or (type(B) is np.ndarray and B.dtype == np.float32 and B.shape == (width,)))):
            rows = (math.prod(shape[:-1]), width)
            scale, nbytes = full_operand_within(Scale, rows, self.shapes)
            bias = None
            if B is not None:
                bias, bias_bytes = full_operand_within(B, rows, self.shapes, pending=nbytes)
                nbytes += bias_bytes
            plan = (rows, _mean_weights(width, np.dtype(np.float32)), np.float32(1.0 / width), scale, bias)
        return self.shapes.put(shape, plan, nbytes)


_UNPLANNED = object()  # a shapes entry not worked out yet


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
