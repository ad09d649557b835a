"""NonZero: the coordinates of non-zero elements, shape ``[rank, count]``, int64, in row-major
order. https://onnx.ai/onnx/operators/onnx__NonZero.html
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


@kernel("NonZero", since=9)
def NonZero(X):
    X = np.asarray(X)
    if X.ndim == 0:
        # A scalar has no coordinates: rank 0 rows, one column if it is non-zero.
        return np.zeros((0, int(bool(X))), dtype=np.int64)
    return np.array(np.nonzero(X), dtype=np.int64).reshape(X.ndim, -1)
