"""What the classic ai.onnx.ml predictors share: the ``post_transform`` of their scores and the
class labels they return.

https://onnx.ai/onnx/operators/onnx_aionnxml_LinearClassifier.html (post_transform: NONE, SOFTMAX,
LOGISTIC, SOFTMAX_ZERO, PROBIT). The binary special cases follow ONNX Runtime, the reference
scikit-learn converters (skl2onnx) are checked against: a classifier that scores one class of two
reports two columns, the score's complement (or negation) first.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.string_ops import as_text


def text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def logistic(scores: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-scores))


def transform_scores(scores: np.ndarray, transform, op: str) -> np.ndarray:
    """``scores`` [N, C] after NONE, LOGISTIC, SOFTMAX or SOFTMAX_ZERO (per row)."""
    name = text(transform)
    if name == "NONE":
        return scores
    if name == "LOGISTIC":
        return logistic(scores)
    if name in ("SOFTMAX", "SOFTMAX_ZERO"):
        keep = np.ones(scores.shape, bool) if name == "SOFTMAX" else scores != 0
        shifted = np.where(keep, scores, -np.inf)
        largest = np.max(shifted, axis=1, keepdims=True)
        exponent = np.where(keep, np.exp(shifted - np.where(np.isfinite(largest), largest, 0)), 0)
        total = np.sum(exponent, axis=1, keepdims=True)
        return exponent / np.where(total == 0, 1, total)
    if name == "PROBIT":
        raise UnsupportedOpError(f"{op}: post_transform PROBIT is not supported (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO)")
    raise KernelError(f"{op}: unknown post_transform {name!r}")


def class_labels(ints, strings, op: str) -> np.ndarray:
    """The classes, int64 or str, from whichever of ``classlabels_int64s``/``_strings`` is set."""
    if strings is not None and len(strings):
        return as_text(list(strings), None)
    if ints is not None and len(ints):
        return np.asarray(list(ints), dtype=np.int64)
    raise KernelError(f"{op}: needs class labels (classlabels_ints/int64s or classlabels_strings)")


def features(X, op: str) -> np.ndarray:
    """X as [N, F] (a 1-D X is one sample), in float32 unless it is float64."""
    X = np.asarray(X)
    if X.dtype.kind not in "fiu":
        raise KernelError(f"{op}: X must be numeric, got {X.dtype}")
    if X.ndim == 1:
        X = X.reshape(1, -1)
    if X.ndim != 2:
        raise KernelError(f"{op}: X must be [N, F], got shape {X.shape}")
    return X if X.dtype in (np.float32, np.float64) else X.astype(np.float32)
