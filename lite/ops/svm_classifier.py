"""SVMClassifier (ai.onnx.ml): libsvm's one-against-one support vector classifier.

https://onnx.ai/onnx/operators/onnx_aionnxml_SVMClassifier.html. The support vectors are grouped
by class (``vectors_per_class``); ``coefficients`` holds ``classes - 1`` rows of one weight per
vector, laid out as libsvm stores its dual coefficients. Each pair of classes ``i < j`` gets the
decision value ``d = sum_i coef[j-1] K + sum_j coef[i] K + rho[pair]`` (positive: class i).

Y is the class with the most pairwise votes (ties: the first). With ``prob_a``/``prob_b`` (Platt
scaling) each pair's ``d`` becomes a probability, ``1 / (1 + exp(d a + b))``, and Z holds the
pairwise probabilities coupled into one per class by libsvm's ``multiclass_probability`` (Wu, Lin
and Weng 2004, method 2). Without, Z holds the pairwise decision values, one column per pair;
two classes give ``Z = [-d, d]``.

These outputs are ONNX Runtime's, which the converters (skl2onnx) are checked against. A model
without support vectors (the spec's linear mode) is not supported.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops._ml_common import class_labels, features, transform_scores
from lite.ops._svm_common import kernel_matrix, vector_rows
from lite.ops.registry import kernel


@kernel("SVMClassifier", since=1, domain="ai.onnx.ml")
def SVMClassifier(X, *, classlabels_ints=None, classlabels_strings=None, coefficients=None, kernel_params=None,
                  kernel_type="LINEAR", post_transform="NONE", prob_a=None, prob_b=None, rho=None,
                  support_vectors=None, vectors_per_class=None):
    op = "SVMClassifier"
    X = features(X, op)
    labels = class_labels(classlabels_ints, classlabels_strings, op)
    if vectors_per_class is None or not len(vectors_per_class):
        raise UnsupportedOpError(f"{op}: a model without support vectors (linear mode) is not supported; "
                                 "write a linear SVM as LinearClassifier (skl2onnx does for LinearSVC)")
    counts = [int(count) for count in vectors_per_class]
    classes = len(counts)
    if classes != labels.shape[0]:
        raise KernelError(f"{op}: vectors_per_class names {classes} classes, the labels {labels.shape[0]}")
    vectors = vector_rows(op, support_vectors, X.shape[1])
    weights = np.asarray(coefficients, dtype=np.float64).reshape(-1)
    if vectors.shape[0] != sum(counts) or weights.size != (classes - 1) * vectors.shape[0]:
        raise KernelError(f"{op}: {vectors.shape[0]} support vectors and {weights.size} coefficients do not fit "
                          f"vectors_per_class {counts} (want {sum(counts)} and {(classes - 1) * sum(counts)})")
    weights = weights.reshape(classes - 1, vectors.shape[0])
    kernels = kernel_matrix(op, X, vectors, kernel_type, kernel_params)
    decisions = _pairwise_decisions(kernels, weights, counts, np.asarray(rho, dtype=np.float64).reshape(-1))
    if prob_a is not None and len(prob_a):
        probabilities = _coupled_probabilities(decisions, classes, np.asarray(prob_a, dtype=np.float64),
                                               np.asarray(prob_b, dtype=np.float64))
        scores = probabilities
    elif classes == 2:
        scores = np.stack([-decisions[:, 0], decisions[:, 0]], axis=1)
    else:
        scores = decisions
    chosen = labels[np.argmax(_votes(decisions, classes), axis=1)]
    return chosen, transform_scores(scores, post_transform, op).astype(np.float32)


def _pairs(classes: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(classes) for j in range(i + 1, classes)]


def _pairwise_decisions(kernels: np.ndarray, weights: np.ndarray, counts: list[int], rho: np.ndarray) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pairs = _pairs(len(counts))
    if rho.size != len(pairs):
        raise KernelError(f"SVMClassifier: {rho.size} rho values for {len(pairs)} pairs of classes")
    decisions = np.empty((kernels.shape[0], len(pairs)))
    for index, (i, j) in enumerate(pairs):
        own = slice(starts[i], starts[i + 1])
        other = slice(starts[j], starts[j + 1])
        decisions[:, index] = (kernels[:, own] @ weights[j - 1, own] + kernels[:, other] @ weights[i, other]
                               + rho[index])
    return decisions


def _votes(decisions: np.ndarray, classes: int) -> np.ndarray:
    votes = np.zeros((decisions.shape[0], classes))
    for index, (i, j) in enumerate(_pairs(classes)):
        votes[:, i] += decisions[:, index] > 0
        votes[:, j] += decisions[:, index] <= 0
    return votes


def _coupled_probabilities(decisions: np.ndarray, classes: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    pairs = _pairs(classes)
    if a.size != len(pairs) or b.size != len(pairs):
        raise KernelError(f"SVMClassifier: prob_a/prob_b need {len(pairs)} values, got {a.size} and {b.size}")
    # Platt's sigmoid in the form that never overflows.
    value = decisions * a + b
    pairwise = np.where(value >= 0, np.exp(-np.abs(value)) / (1 + np.exp(-np.abs(value))),
                        1 / (1 + np.exp(-np.abs(value))))
    pairwise = np.clip(pairwise, 1e-7, 1 - 1e-7)
    result = np.empty((decisions.shape[0], classes))
    for row in range(decisions.shape[0]):
        r = np.zeros((classes, classes))
        for index, (i, j) in enumerate(pairs):
            r[i, j] = pairwise[row, index]
            r[j, i] = 1 - pairwise[row, index]
        result[row] = _multiclass_probability(r)
    return result


def _multiclass_probability(r: np.ndarray) -> np.ndarray:
    """libsvm's ``multiclass_probability``: the p minimizing ``sum (r_ji p_i - r_ij p_j)^2``."""
    k = r.shape[0]
    Q = -r.T * r
    np.fill_diagonal(Q, (r * r).sum(axis=0) - np.diag(r) ** 2)
    p = np.full(k, 1.0 / k)
    for _ in range(max(100, k)):
        Qp = Q @ p
        pQp = p @ Qp
        if np.max(np.abs(Qp - pQp)) < 0.005 / k:
            break
        for t in range(k):
            diff = (-Qp[t] + pQp) / Q[t, t]
            p[t] += diff
            pQp = (pQp + diff * (diff * Q[t, t] + 2 * Qp[t])) / (1 + diff) / (1 + diff)
            Qp = (Qp + diff * Q[t]) / (1 + diff)
            p /= 1 + diff
    return p
