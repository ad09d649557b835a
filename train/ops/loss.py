"""Loss kernels: fused softmax cross-entropy, squared and absolute error."""

from __future__ import annotations

import numpy as np

from train.autograd import make_result
from train.errors import ShapeError
from train.tensor import Tensor

REDUCTIONS = ("none", "mean", "sum")


def _reduce(per_sample: np.ndarray, reduction: str) -> tuple[np.ndarray, float]:
    """Reduced value and the factor d(reduced)/d(each element)."""
    if reduction == "mean":
        return np.asarray(per_sample.mean()), 1.0 / max(per_sample.size, 1)
    if reduction == "sum":
        return np.asarray(per_sample.sum()), 1.0
    return per_sample, 1.0


def _expand(grad: np.ndarray, shape: tuple[int, ...], reduction: str, factor: float) -> np.ndarray:
    if reduction == "none":
        return grad
    return np.broadcast_to(grad * factor, shape)


def softmax_cross_entropy(logits: Tensor, labels: Tensor, sparse: bool, reduction: str) -> Tensor:
    """``nn.SoftmaxCrossEntropyWithLogits``: -sum(onehot * log_softmax(logits)) per row."""
    z = logits.data
    if z.ndim != 2:
        raise ShapeError(f"SoftmaxCrossEntropyWithLogits: logits must be (N, classes), got {z.shape}")
    shifted = z - z.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    log_probs = shifted - np.log(total)
    if sparse:
        index = labels.data.astype(np.int64).reshape(-1)
        if index.shape[0] != z.shape[0]:
            raise ShapeError(f"SoftmaxCrossEntropyWithLogits: {index.shape[0]} labels for {z.shape[0]} rows")
        target = np.zeros_like(z)
        target[np.arange(z.shape[0]), index] = 1
    else:
        target = labels.data.astype(z.dtype)
    per_sample = -(target * log_probs).sum(axis=1)
    value, factor = _reduce(per_sample, reduction)

    def backward(g: np.ndarray) -> tuple:
        g_rows = _expand(g, per_sample.shape, reduction, factor)[:, None]
        return (g_rows * (exp / total - target), None)

    return make_result(value.astype(z.dtype), (logits, labels), backward)


def mse(prediction: Tensor, target: Tensor, reduction: str) -> Tensor:
    diff = prediction.data - target.data
    value, factor = _reduce(diff * diff, reduction)

    def backward(g: np.ndarray) -> tuple:
        d = 2.0 * diff * _expand(g, diff.shape, reduction, factor)
        return (d if prediction.requires_grad else None, -d if target.requires_grad else None)

    return make_result(value.astype(diff.dtype), (prediction, target), backward)


def l1(prediction: Tensor, target: Tensor, reduction: str) -> Tensor:
    diff = prediction.data - target.data
    value, factor = _reduce(np.abs(diff), reduction)

    def backward(g: np.ndarray) -> tuple:
        d = np.sign(diff) * _expand(g, diff.shape, reduction, factor)
        return (d if prediction.requires_grad else None, -d if target.requires_grad else None)

    return make_result(value.astype(diff.dtype), (prediction, target), backward)
