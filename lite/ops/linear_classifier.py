"""LinearClassifier (ai.onnx.ml): one linear score per class, then the best class's label.

https://onnx.ai/onnx/operators/onnx_aionnxml_LinearClassifier.html. ``Z = X @ coefficients.T +
intercepts`` (``coefficients`` holds one row of weights per score), transformed by
``post_transform``; ``Y`` is the label of each row's largest score. A binary classifier may store
one row only (the positive class's score): Y is then the second label where that score is
positive (past 0.5 after LOGISTIC), and Z gets two columns, ``[1 - s, s]`` (``s`` after
``post_transform``), as ONNX Runtime writes them.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import class_labels, features, logistic, text, transform_scores
from lite.ops.registry import kernel


@kernel("LinearClassifier", since=1, domain="ai.onnx.ml")
def LinearClassifier(X, *, classlabels_ints=None, classlabels_strings=None, coefficients, intercepts=None,
                     multi_class=0, post_transform="NONE"):
    X = features(X, "LinearClassifier")
    labels = class_labels(classlabels_ints, classlabels_strings, "LinearClassifier")
    weights = np.asarray(coefficients, dtype=np.float32)
    if weights.size % X.shape[1]:
        raise KernelError(f"LinearClassifier: {weights.size} coefficients do not make rows of {X.shape[1]} features")
    rows = weights.size // X.shape[1]
    scores = X.astype(np.float32) @ weights.reshape(rows, X.shape[1]).T
    if intercepts is not None and len(intercepts):
        scores = scores + np.asarray(intercepts, dtype=np.float32)
    transform = text(post_transform)
    if rows == 1 and labels.shape[0] == 2:
        return _binary(scores[:, 0], labels, transform)
    if rows != labels.shape[0]:
        raise KernelError(f"LinearClassifier: {rows} rows of coefficients for {labels.shape[0]} class labels")
    scores = transform_scores(scores, transform, "LinearClassifier")
    return labels[np.argmax(scores, axis=1)], scores.astype(np.float32)


def _binary(score: np.ndarray, labels: np.ndarray, transform: str) -> tuple[np.ndarray, np.ndarray]:
    transformed = logistic(score) if transform == "LOGISTIC" else transform_scores(score[:, None], transform,
                                                                                   "LinearClassifier")[:, 0]
    positive = transformed > 0.5 if transform == "LOGISTIC" else score > 0
    return labels[positive.astype(np.int64)], np.stack([1 - transformed, transformed], 1).astype(np.float32)
