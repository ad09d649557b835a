"""Loss cells: ``SoftmaxCrossEntropyWithLogits``, ``MSELoss``, ``L1Loss`` (``mindspore.nn.loss``)."""

from __future__ import annotations

from typing import Any

from train import ops
from train.errors import ShapeError
from train.nn.cell import Cell
from train.ops.loss import REDUCTIONS
from train.tensor import Tensor


class LossBase(Cell):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ShapeError(
                f"{type(self).__name__}: reduction must be one of {REDUCTIONS}, got {reduction!r}"
            )
        self.reduction = reduction


def _tensor(value: Any) -> Tensor:
    return value if isinstance(value, Tensor) else Tensor(value)


class SoftmaxCrossEntropyWithLogits(LossBase):
    """Cross-entropy of softmax(logits); ``sparse=True`` takes class indices, else one-hot/probabilities.

    MindSpore's default is ``sparse=False, reduction='none'``.
    """

    def __init__(self, sparse: bool = False, reduction: str = "none") -> None:
        super().__init__(reduction)
        self.sparse = sparse

    def construct(self, logits: Tensor, labels: Any) -> Tensor:
        return ops.softmax_cross_entropy(logits, _tensor(labels), self.sparse, self.reduction)


class MSELoss(LossBase):
    """Mean squared error, ``(x - y)**2`` then ``reduction`` (default 'mean')."""

    def construct(self, logits: Tensor, labels: Any) -> Tensor:
        return ops.mse(logits, _tensor(labels), self.reduction)


class L1Loss(LossBase):
    """Mean absolute error, ``|x - y|`` then ``reduction`` (default 'mean')."""

    def construct(self, logits: Tensor, labels: Any) -> Tensor:
        return ops.l1(logits, _tensor(labels), self.reduction)


class WithLossCell(Cell):
    """``nn.WithLossCell(backbone, loss_fn)``: ``loss_fn(backbone(data), label)``; adds no name prefix."""

    def __init__(self, backbone: Cell, loss_fn: Cell) -> None:
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self._loss_fn = loss_fn

    def construct(self, data: Tensor, label: Tensor) -> Tensor:
        return self._loss_fn(self._backbone(data), label)
