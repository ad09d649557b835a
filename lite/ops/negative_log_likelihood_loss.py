"""NegativeLogLikelihoodLoss: minus the log-probability of each sample's target class, reduced.

https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html

``input`` is ``(N, C, d1, ..., dk)`` log-probabilities, ``target`` ``(N, d1, ..., dk)`` class
indices. Each sample's loss is ``-input[n, target, d...] * weight[target]`` (weight 1 when
absent) and 0 where ``target == ignore_index``. ``reduction``: ``none`` keeps the per-sample
losses, ``sum`` adds them, ``mean`` divides the sum by the total weight of the samples not
ignored (their count without ``weight``).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel

_REDUCTIONS = ("none", "sum", "mean")


def negative_log_likelihood(op_type: str, log_probabilities: np.ndarray, target: np.ndarray,
                            weight: np.ndarray | None, ignore_index: int | None, reduction: str) -> np.ndarray:
    """The loss of NegativeLogLikelihoodLoss (shared with SoftmaxCrossEntropyLoss)."""
    if reduction not in _REDUCTIONS:
        raise KernelError(f"{op_type}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    log_probabilities = np.asarray(log_probabilities)
    target = np.asarray(target).astype(np.int64, copy=False)
    if log_probabilities.ndim < 2 or target.shape != log_probabilities.shape[:1] + log_probabilities.shape[2:]:
        raise KernelError(
            f"{op_type}: input of shape {log_probabilities.shape} needs a target of shape "
            f"(N, d1, ..., dk) = {log_probabilities.shape[:1] + log_probabilities.shape[2:]}, got {target.shape}"
        )
    classes = log_probabilities.shape[1]
    kept = np.ones(target.shape, dtype=bool) if ignore_index is None else target != ignore_index
    # Ignored samples may hold any value (often negative): pick a valid class for them, masked below.
    safe_target = np.where(kept, target, 0)
    if np.any((safe_target < 0) | (safe_target >= classes)):
        raise KernelError(f"{op_type}: target values must lie in [0, {classes}) or equal ignore_index")
    picked = np.take_along_axis(log_probabilities, np.expand_dims(safe_target, 1), axis=1).squeeze(1)
    dtype = log_probabilities.dtype
    if weight is None:
        sample_weight = kept.astype(dtype)
    else:
        sample_weight = np.where(kept, np.asarray(weight)[safe_target], 0).astype(dtype)
    loss = -picked * sample_weight
    if reduction == "none":
        return loss
    total = np.sum(loss, dtype=dtype)
    if reduction == "sum":
        return np.asarray(total, dtype=dtype)
    return np.asarray(total / np.sum(sample_weight, dtype=dtype), dtype=dtype)


@kernel("NegativeLogLikelihoodLoss", since=12)
def NegativeLogLikelihoodLoss(input, target, weight=None, *, ignore_index=None, reduction="mean"):
    return negative_log_likelihood("NegativeLogLikelihoodLoss", input, target, weight, ignore_index, reduction)
