"""LinearRegressor (ai.onnx.ml): ``Y = X @ coefficients.T + intercepts`` for ``targets`` outputs.

https://onnx.ai/onnx/operators/onnx_aionnxml_LinearRegressor.html. ``coefficients`` holds
``targets`` rows of one weight per feature; Y is [N, targets] float32, then ``post_transform``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import features, transform_scores
from lite.ops.registry import kernel


@kernel("LinearRegressor", since=1, domain="ai.onnx.ml")
def LinearRegressor(X, *, coefficients=None, intercepts=None, post_transform="NONE", targets=1):
    X = features(X, "LinearRegressor")
    weights = np.asarray(coefficients if coefficients is not None else [], dtype=np.float32)
    if weights.size != targets * X.shape[1]:
        raise KernelError(f"LinearRegressor: {weights.size} coefficients for {targets} target(s) "
                          f"of {X.shape[1]} features (want {targets * X.shape[1]})")
    scores = X.astype(np.float32) @ weights.reshape(targets, X.shape[1]).T
    if intercepts is not None and len(intercepts):
        scores = scores + np.asarray(intercepts, dtype=np.float32)
    return transform_scores(scores, post_transform, "LinearRegressor").astype(np.float32)
