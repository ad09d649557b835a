"""BatchNormalization: per-channel affine normalization with stored (or batch) statistics.

https://onnx.ai/onnx/operators/onnx__BatchNormalization.html

Inference folds the four parameters into one scale and one shift per channel, so the input is
read once by a multiply and once by an in-place add. Opsets before 9 carry ``spatial``
(``spatial=0`` means the parameters have shape ``(C, D1, ..., Dn)``, one per activation);
opset 14 adds ``training_mode``, where the batch's own statistics normalize and the running
statistics are updated with ``momentum``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._conv_common import compute_dtype
from lite.ops.registry import kernel


def _normalize(X, scale, B, mean, var, epsilon, spatial=1, allocate=np.empty):
    dtype = compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    if x.ndim < 2:
        raise UnsupportedOpError(f"BatchNormalization: input must be (N, C, ...), got shape {x.shape}")
    factor = np.asarray(scale, dtype=dtype) / np.sqrt(np.asarray(var, dtype=dtype) + dtype.type(epsilon))
    shift = np.asarray(B, dtype=dtype) - np.asarray(mean, dtype=dtype) * factor
    if spatial:
        shape = (x.shape[1],) + (1,) * (x.ndim - 2)
        factor, shift = factor.reshape(shape), shift.reshape(shape)
    y = allocate(np.broadcast_shapes(x.shape, factor.shape), dtype)
    np.multiply(x, factor, out=y)
    y += shift
    return y.astype(X.dtype, copy=False)


@kernel("BatchNormalization", since=1)
def BatchNormalization_1(
    X, scale, B, mean, var, *, consumed_inputs=None, epsilon=1e-5, is_test=0, momentum=0.9, spatial=1,
    allocate=np.empty,
):
    return _normalize(X, scale, B, mean, var, epsilon, spatial, allocate)


@kernel("BatchNormalization", since=6)
def BatchNormalization_6(
    X, scale, B, mean, var, *, epsilon=1e-5, is_test=0, momentum=0.9, spatial=1, allocate=np.empty
):
    return _normalize(X, scale, B, mean, var, epsilon, spatial, allocate)


@kernel("BatchNormalization", since=7)
def BatchNormalization_7(X, scale, B, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1, allocate=np.empty):
    return _normalize(X, scale, B, mean, var, epsilon, spatial, allocate)


@kernel("BatchNormalization", since=9)
def BatchNormalization_9(X, scale, B, mean, var, *, epsilon=1e-5, momentum=0.9, allocate=np.empty):
    return _normalize(X, scale, B, mean, var, epsilon, allocate=allocate)


@kernel("BatchNormalization", since=14)
def BatchNormalization(
    X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, training_mode=0, allocate=np.empty
):
    """Outputs Y, and with ``training_mode=1`` also running_mean and running_var."""
    if not training_mode:
        return _normalize(X, scale, B, input_mean, input_var, epsilon, allocate=allocate)
    dtype = compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    axes = (0,) + tuple(range(2, x.ndim))
    batch_mean = x.mean(axis=axes)
    batch_var = x.var(axis=axes)
    y = _normalize(X, scale, B, batch_mean, batch_var, epsilon)
    running_mean = np.asarray(input_mean) * momentum + batch_mean * (1 - momentum)
    running_var = np.asarray(input_var) * momentum + batch_var * (1 - momentum)
    return (
        y,
        running_mean.astype(np.asarray(input_mean).dtype),
        running_var.astype(np.asarray(input_var).dtype),
    )
