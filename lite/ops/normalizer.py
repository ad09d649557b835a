"""Normalizer (ai.onnx.ml): divide each row of X by its MAX, L1 or L2 norm.

https://onnx.ai/onnx/operators/onnx_aionnxml_Normalizer.html. MAX divides by the row's largest
value, L1 by the sum of absolute values, L2 by the Euclidean norm; a row whose norm is 0 stays as it
is (as ONNX Runtime leaves it). Y is float32; a 1-D X is one row.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import text
from lite.ops.registry import kernel


@kernel("Normalizer", since=1, domain="ai.onnx.ml")
def Normalizer(X, *, norm="MAX"):
    X = np.asarray(X).astype(np.float32)
    rows = X.reshape(1, -1) if X.ndim == 1 else X
    kind = text(norm)
    if kind == "MAX":
        divisor = np.max(rows, axis=-1, keepdims=True)
    elif kind == "L1":
        divisor = np.sum(np.abs(rows), axis=-1, keepdims=True)
    elif kind == "L2":
        divisor = np.sqrt(np.sum(rows * rows, axis=-1, keepdims=True))
    else:
        raise KernelError(f"Normalizer: norm must be MAX, L1 or L2, got {kind!r}")
    normalized = rows / np.where(divisor == 0, 1, divisor)
    return normalized.reshape(X.shape).astype(np.float32)
