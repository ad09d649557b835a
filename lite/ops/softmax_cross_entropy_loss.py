"""SoftmaxCrossEntropyLoss: NegativeLogLikelihoodLoss of the log-softmax of the scores over C.

https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html

``scores`` is ``(N, C)`` or ``(N, C, d1, ..., dk)``; the optional second output ``log_prob`` is
the log-softmax itself, shaped like ``scores``. Weighting, ``ignore_index`` and ``reduction``
follow NegativeLogLikelihoodLoss.
"""

from __future__ import annotations

import numpy as np

from lite.ops.negative_log_likelihood_loss import negative_log_likelihood
from lite.ops.registry import kernel


def _log_softmax(scores: np.ndarray, axis: int) -> np.ndarray:
    shifted = scores - np.max(scores, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@kernel("SoftmaxCrossEntropyLoss", since=12)
def SoftmaxCrossEntropyLoss(scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    scores = np.asarray(scores)
    log_prob = _log_softmax(scores, axis=1).astype(scores.dtype, copy=False)
    loss = negative_log_likelihood("SoftmaxCrossEntropyLoss", log_prob, labels, weights, ignore_index, reduction)
    return loss, log_prob
