"""The kernels SVMClassifier and SVMRegressor (ai.onnx.ml) share.

https://onnx.ai/onnx/operators/onnx_aionnxml_SVMClassifier.html: ``kernel_params`` is
``[gamma, coef0, degree]``; LINEAR ``x·v``, POLY ``(gamma x·v + coef0)^degree``, RBF
``exp(-gamma |x - v|^2)``, SIGMOID ``tanh(gamma x·v + coef0)``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import text


def vector_rows(op: str, vectors, features: int) -> np.ndarray:
    flat = np.asarray(vectors if vectors is not None else [], dtype=np.float64).reshape(-1)
    if features == 0 or flat.size % features:
        raise KernelError(f"{op}: {flat.size} support vector values do not make vectors of {features} features")
    return flat.reshape(-1, features)


def kernel_matrix(op: str, X: np.ndarray, vectors: np.ndarray, kernel_type, kernel_params) -> np.ndarray:
    """[N, vectors]: the kernel of every sample with every support vector."""
    params = list(kernel_params) if kernel_params is not None else []
    gamma, coef0, degree = (params + [0.0, 0.0, 0.0][len(params):])[:3]
    name = text(kernel_type)
    values = X.astype(np.float64)
    if name == "LINEAR":
        return values @ vectors.T
    if name == "POLY":
        return (gamma * (values @ vectors.T) + coef0) ** degree
    if name == "RBF":
        squared = (values * values).sum(1)[:, None] - 2 * values @ vectors.T + (vectors * vectors).sum(1)[None, :]
        return np.exp(-gamma * np.maximum(squared, 0.0))
    if name == "SIGMOID":
        return np.tanh(gamma * (values @ vectors.T) + coef0)
    raise KernelError(f"{op}: kernel_type must be LINEAR, POLY, RBF or SIGMOID, got {name!r}")
