"""LayerNormalization: normalize over the axes from ``axis`` on, then scale and shift.

https://onnx.ai/onnx/operators/onnx__LayerNormalization.html

Statistics are computed in the ``stash_type`` precision (1 = float32); the optional Mean and
InvStdDev outputs keep the normalized axes as size 1.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel

_STASH_TYPES = {1: np.float32, 11: np.float64}


@kernel("LayerNormalization", since=17)
def LayerNormalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    if stash_type not in _STASH_TYPES:
        raise UnsupportedOpError(
            f"LayerNormalization: stash_type {stash_type} is not supported (expected 1 float32 or 11 double)"
        )
    stash = np.dtype(_STASH_TYPES[stash_type])
    x = np.asarray(X).astype(stash, copy=False)
    axis = axis + x.ndim if axis < 0 else axis
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + stash.type(epsilon))
    y = centered * inv_std * np.asarray(Scale).astype(stash)
    if B is not None:
        y = y + np.asarray(B).astype(stash)
    return y.astype(X.dtype, copy=False), mean.astype(stash), inv_std.astype(stash)
