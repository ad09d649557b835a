"""Det: the determinant of square matrices over the last two axes ``[*, M, M] -> [*]``.
https://onnx.ai/onnx/operators/onnx__Det.html
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Det", since=11)
def Det(X):
    X = np.asarray(X)
    if X.ndim < 2 or X.shape[-1] != X.shape[-2]:
        raise KernelError(f"Det: expected square matrices [*, M, M], got shape {X.shape}")
    return np.asarray(np.linalg.det(X)).astype(X.dtype, copy=False)
