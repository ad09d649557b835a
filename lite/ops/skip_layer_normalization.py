"""ONNX Runtime's fused layer norms: SkipLayerNormalization, SkipSimplifiedLayerNormalization
(com.microsoft) and SimplifiedLayerNormalization (which ONNX Runtime registers in the default
ONNX domain, version 1, where its optimizer writes it for T5 and LLaMA).

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.SkipLayerNormalization

ONNX Runtime's transformer optimizer writes them for the residual add and norm of every block::

    sum = input + skip (+ bias)                       the 4th output, input_skip_bias_sum
    SkipLayerNormalization:      (sum - mean) * inv_std_var * gamma (+ beta)
    SkipSimplifiedLayerNormalization / SimplifiedLayerNormalization (RMS norm, no centring):
                                 sum * inv_std_var * gamma
    inv_std_var = 1 / sqrt(variance (or mean square) + epsilon), over the last axis

``skip`` has the input's shape or broadcasts to it ((1, S, H) or (S, H)). The mean and
inv_std_var outputs keep the normalized axis as size 1, in float32. Statistics are float32
(ONNX Runtime accumulates them in double; the difference is float32 rounding).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.layer_normalization import _normalize_rows
from lite.ops.registry import kernel

# ONNX Runtime's schema default for the skip norms (its optimizer writes the model's value).
_SKIP_EPSILON = 1e-12


def _residual_sum(op_type: str, input, skip, bias) -> np.ndarray:
    """input + skip (+ bias) in float32, checking the widths agree as ONNX Runtime does."""
    x = np.asarray(input)
    hidden = x.shape[-1]
    if np.shape(skip)[-1:] != (hidden,) or (bias is not None and np.shape(bias) != (hidden,)):
        raise KernelError(f"{op_type}: skip and bias must end in the input's hidden size {hidden}, got "
                          f"skip {np.shape(skip)}, bias {None if bias is None else np.shape(bias)}")
    total = np.add(x, skip, dtype=np.float32)
    if bias is not None:
        total += np.asarray(bias, np.float32)
    return total


def _layer_norm(total: np.ndarray, gamma, beta, epsilon: float):
    """(normalized, mean, inv_std_var) of float32 ``total`` over its last axis, all float32: the
    row statistics of LayerNormalization's kernel (a few numpy calls over all rows at once)."""
    rows = total.reshape(-1, total.shape[-1])
    return _normalize_rows(total, rows, total.ndim - 1, gamma, beta, np.float32(epsilon), total.dtype)


def _rms_norm(total: np.ndarray, gamma, epsilon: float, axes: tuple[int, ...] = (-1,)):
    """(normalized, inv_std_var) of ``total`` over ``axes``, float32."""
    inv_std = 1.0 / np.sqrt(np.mean(total * total, axis=axes, keepdims=True) + np.float32(epsilon))
    y = total * inv_std
    y *= np.asarray(gamma, np.float32)
    return y, inv_std


@kernel("SkipLayerNormalization", since=1, domain="com.microsoft")
def SkipLayerNormalization(input, skip, gamma, beta=None, bias=None, *, epsilon=_SKIP_EPSILON):
    total = _residual_sum("SkipLayerNormalization", input, skip, bias)
    y, mean, inv_std = _layer_norm(total, gamma, beta, epsilon)
    dtype = np.asarray(input).dtype
    return y.astype(dtype, copy=False), mean, inv_std, total.astype(dtype, copy=False)


@kernel("SkipSimplifiedLayerNormalization", since=1, domain="com.microsoft")
def SkipSimplifiedLayerNormalization(input, skip, gamma, bias=None, *, epsilon=_SKIP_EPSILON):
    total = _residual_sum("SkipSimplifiedLayerNormalization", input, skip, bias)
    y, inv_std = _rms_norm(total, gamma, epsilon)
    dtype = np.asarray(input).dtype
    mean = np.zeros(inv_std.shape, np.float32)  # declared by the schema, never computed by ONNX Runtime
    return y.astype(dtype, copy=False), mean, inv_std, total.astype(dtype, copy=False)


@kernel("SimplifiedLayerNormalization", since=1)
def SimplifiedLayerNormalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """RMS norm over the axes from ``axis`` on: Y (X's type) and inv_std_var (float32)."""
    X = np.asarray(X)
    axes = tuple(range(normalize_axis("SimplifiedLayerNormalization", axis, X.ndim), X.ndim))
    y, inv_std = _rms_norm(X.astype(np.float32, copy=False), np.asarray(scale).reshape(X.shape[axes[0]:]),
                           epsilon, axes)
    return y.astype(X.dtype, copy=False), inv_std

