"""GroupNormalization: normalize each group of channels of each sample, then scale and shift.

https://onnx.ai/onnx/operators/onnx__GroupNormalization.html

Opset 18 takes ``scale``/``bias`` per group (shape ``(num_groups,)``); opset 21 per channel
(shape ``(C,)``) and adds ``stash_type``.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


def _normalized(X, num_groups, epsilon, dtype):
    x = np.asarray(X).astype(dtype, copy=False)
    batch, channels = x.shape[:2]
    if num_groups <= 0 or channels % num_groups:
        raise UnsupportedOpError(
            f"GroupNormalization: {channels} channels do not split into num_groups={num_groups}"
        )
    # The group's width spelled out: numpy cannot infer -1 for a batch of 0.
    grouped = x.reshape(batch, num_groups, channels // num_groups * math.prod(x.shape[2:]))
    mean = grouped.mean(axis=-1, keepdims=True)
    var = grouped.var(axis=-1, keepdims=True)
    return ((grouped - mean) / np.sqrt(var + dtype.type(epsilon))).reshape(x.shape)


@kernel("GroupNormalization", since=18)
def GroupNormalization_18(X, scale, bias, *, epsilon=1e-5, num_groups=None):
    dtype = np.dtype(np.float64 if X.dtype == np.float64 else np.float32)
    y = _normalized(X, num_groups, epsilon, dtype)
    per_channel = X.shape[1] // num_groups
    shape = (X.shape[1],) + (1,) * (X.ndim - 2)
    gamma = np.repeat(np.asarray(scale, dtype=dtype), per_channel).reshape(shape)
    beta = np.repeat(np.asarray(bias, dtype=dtype), per_channel).reshape(shape)
    return (y * gamma + beta).astype(X.dtype, copy=False)


@kernel("GroupNormalization", since=21)
def GroupNormalization(X, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1):
    dtype = np.dtype(np.float64 if stash_type == 11 else np.float32)
    y = _normalized(X, num_groups, epsilon, dtype)
    shape = (X.shape[1],) + (1,) * (X.ndim - 2)
    y = y * np.asarray(scale, dtype=dtype).reshape(shape) + np.asarray(bias, dtype=dtype).reshape(shape)
    return y.astype(X.dtype, copy=False)
