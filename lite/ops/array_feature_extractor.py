"""ArrayFeatureExtractor (ai.onnx.ml): select positions of X's last axis.

https://onnx.ai/onnx/operators/onnx_aionnxml_ArrayFeatureExtractor.html

``Z = X[..., Y.ravel()]``, shaped ``[*X.shape[:-1], Y.size]``; a 1-D X gives ``[1, Y.size]``
(as ONNX Runtime does).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def ArrayFeatureExtractor(X, Y):
    X = np.asarray(X)
    indices = np.asarray(Y).astype(np.int64, copy=False).reshape(-1)
    if X.ndim == 0 or np.any((indices < 0) | (indices >= X.shape[-1])):
        raise KernelError(
            f"ArrayFeatureExtractor: indices {indices.tolist()} are out of range for the last axis of shape {X.shape}"
        )
    selected = np.take(X, indices, axis=-1)
    return selected.reshape(1, -1) if X.ndim == 1 else selected
