"""RMSNormalization: divide by the root mean square over the axes from ``axis`` on, then scale.

https://onnx.ai/onnx/operators/onnx__RMSNormalization.html

``Normalized = X / sqrt(mean(X^2) + epsilon)`` is computed in the ``stash_type`` precision
(1 = float32) and cast back to X's type; ``Y = Normalized * scale`` has scale's type.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel

_STASH_TYPES = {1: np.float32, 11: np.float64}


@kernel("RMSNormalization", since=23)
def RMSNormalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    if stash_type not in _STASH_TYPES:
        raise UnsupportedOpError(
            f"RMSNormalization: stash_type {stash_type} is not supported (expected 1 float32 or 11 double)"
        )
    stash = np.dtype(_STASH_TYPES[stash_type])
    X = np.asarray(X)
    x = X.astype(stash, copy=False)
    axes = tuple(range(normalize_axis("RMSNormalization", axis, x.ndim), x.ndim))
    mean_square = np.mean(x * x, axis=axes, keepdims=True)
    normalized = (x / np.sqrt(mean_square + stash.type(epsilon))).astype(X.dtype, copy=False)
    scale = np.asarray(scale)
    return (normalized * scale).astype(scale.dtype, copy=False)
