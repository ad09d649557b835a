"""SVMRegressor (ai.onnx.ml): ``sum_j coefficients[j] K(x, support_vectors[j]) + rho``.

https://onnx.ai/onnx/operators/onnx_aionnxml_SVMRegressor.html. Without support vectors
(``n_supports`` 0) the model is linear, ``x·coefficients + rho``; ``one_class`` turns the score
into +1 / -1 (scikit-learn's OneClassSVM). Y is [N, 1] float32.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import features, transform_scores
from lite.ops._svm_common import kernel_matrix, vector_rows
from lite.ops.registry import kernel


@kernel("SVMRegressor", since=1, domain="ai.onnx.ml")
def SVMRegressor(X, *, coefficients=None, kernel_params=None, kernel_type="LINEAR", n_supports=0, one_class=0,
                 post_transform="NONE", rho=None, support_vectors=None):
    op = "SVMRegressor"
    X = features(X, op)
    weights = np.asarray(coefficients if coefficients is not None else [], dtype=np.float64)
    bias = float(rho[0]) if rho is not None and len(rho) else 0.0
    if n_supports:
        vectors = vector_rows(op, support_vectors, X.shape[1])
        if vectors.shape[0] != weights.size:
            raise KernelError(f"{op}: {vectors.shape[0]} support vectors but {weights.size} coefficients")
        scores = kernel_matrix(op, X, vectors, kernel_type, kernel_params) @ weights + bias
    else:
        if weights.size != X.shape[1]:
            raise KernelError(f"{op}: a linear model needs one coefficient per feature ({X.shape[1]}), got {weights.size}")
        scores = X.astype(np.float64) @ weights + bias
    if one_class:
        scores = np.where(scores > 0, 1.0, -1.0)
    return transform_scores(scores[:, None], post_transform, op).astype(np.float32)

