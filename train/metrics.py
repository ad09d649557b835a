"""Evaluation metrics (``mindspore.train.Metric``): ``clear``, ``update(logits, labels)``, ``eval``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from train.errors import TrainError


class MetricError(TrainError, ValueError):
    """An unknown metric name, or a metric evaluated before any update."""


def _array(value: Any) -> np.ndarray:
    return np.asarray(value.data if hasattr(value, "data") and not isinstance(value, np.ndarray) else value)


class Metric:
    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        raise NotImplementedError

    def update(self, *inputs: Any) -> None:
        raise NotImplementedError

    def eval(self) -> float:
        raise NotImplementedError


class Accuracy(Metric):
    """Fraction of rows whose arg-max matches the label (class indices or one-hot)."""

    def clear(self) -> None:
        self.correct = 0
        self.total = 0

    def update(self, logits: Any, labels: Any) -> None:
        predicted = _array(logits).argmax(axis=1)
        truth = _array(labels)
        if truth.ndim == 2:
            truth = truth.argmax(axis=1)
        self.correct += int((predicted == truth.reshape(-1)).sum())
        self.total += predicted.shape[0]

    def eval(self) -> float:
        if self.total == 0:
            raise MetricError("Accuracy.eval() before any update: the dataset was empty")
        return self.correct / self.total


class TopKCategoricalAccuracy(Metric):
    def __init__(self, k: int = 5) -> None:
        self.k = k
        super().__init__()

    def clear(self) -> None:
        self.correct = 0
        self.total = 0

    def update(self, logits: Any, labels: Any) -> None:
        scores = _array(logits)
        truth = _array(labels).reshape(-1)
        top = np.argsort(-scores, axis=1)[:, : self.k]
        self.correct += int((top == truth[:, None]).any(axis=1).sum())
        self.total += scores.shape[0]

    def eval(self) -> float:
        if self.total == 0:
            raise MetricError("TopKCategoricalAccuracy.eval() before any update")
        return self.correct / self.total


class Loss(Metric):
    """Mean of the loss values seen (weighted by batch size when given)."""

    def clear(self) -> None:
        self.sum = 0.0
        self.count = 0

    def update(self, loss: Any, batch_size: int = 1) -> None:
        self.sum += float(_array(loss).mean()) * batch_size
        self.count += batch_size

    def eval(self) -> float:
        if self.count == 0:
            raise MetricError("Loss.eval() before any update")
        return self.sum / self.count


_BY_NAME = {
    "accuracy": Accuracy,
    "acc": Accuracy,
    "loss": Loss,
    "top_1_accuracy": lambda: TopKCategoricalAccuracy(1),
    "top_5_accuracy": lambda: TopKCategoricalAccuracy(5),
}


def get_metrics(metrics: Iterable[str] | Mapping[str, Metric] | None) -> dict[str, Metric]:
    """``{"accuracy", "loss"}`` or ``{"name": Metric()}`` -> ``{name: Metric}``."""
    if metrics is None:
        return {}
    if isinstance(metrics, Mapping):
        return dict(metrics)
    result = {}
    for name in sorted(metrics):
        if name not in _BY_NAME:
            raise MetricError(
                f"unknown metric {name!r}; use one of {sorted(_BY_NAME)} or pass Metric objects"
            )
        result[name] = _BY_NAME[name]()
    return result
