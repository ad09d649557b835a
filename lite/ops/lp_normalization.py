"""LpNormalization: divide by the L1 or L2 norm along ``axis``.

https://onnx.ai/onnx/operators/onnx__LpNormalization.html
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


@kernel("LpNormalization", since=1)
def LpNormalization(input, *, axis=-1, p=2):
    x = np.asarray(input)
    if p == 1:
        norm = np.sum(np.abs(x), axis=axis, keepdims=True)
    elif p == 2:
        norm = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    else:
        raise UnsupportedOpError(f"LpNormalization: p must be 1 or 2, got {p}")
    # A zero vector stays zero (the operator's reference output), rather than 0/0 = NaN.
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norm == 0, 0, x / norm).astype(x.dtype, copy=False)
