"""Losses: values against direct formulas and finite-difference gradients in float64."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train.gradcheck import check_function
from train import ShapeError, Tensor, nn

rng = np.random.default_rng(0)


def log_softmax(z):
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_sparse_softmax_cross_entropy(reduction):
    logits = rng.standard_normal((5, 4)) * 3
    labels = np.array([0, 3, 1, 1, 2])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction=reduction)
    per_row = -log_softmax(logits)[np.arange(5), labels]
    expected = {"none": per_row, "mean": per_row.mean(), "sum": per_row.sum()}[reduction]
    np.testing.assert_allclose(loss(Tensor(logits), Tensor(labels)).asnumpy(), expected, rtol=1e-12)
    check_function(lambda z: loss(z, Tensor(labels)), [logits])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_dense_softmax_cross_entropy(reduction):
    logits = rng.standard_normal((3, 4))
    target = rng.random((3, 4))
    target /= target.sum(axis=1, keepdims=True)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction=reduction)
    per_row = -(target * log_softmax(logits)).sum(axis=1)
    expected = {"none": per_row, "mean": per_row.mean(), "sum": per_row.sum()}[reduction]
    np.testing.assert_allclose(loss(Tensor(logits), Tensor(target)).asnumpy(), expected, rtol=1e-12)
    check_function(lambda z: loss(z, Tensor(target)), [logits])


def test_softmax_cross_entropy_is_stable_for_huge_logits():
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    value = loss(Tensor(np.array([[1000.0, 0.0], [0.0, 1000.0]], np.float32)), Tensor(np.array([0, 0])))
    assert np.isfinite(value.asnumpy()) and value.asnumpy() == pytest.approx(500.0)


def test_mindspore_defaults_and_bad_arguments():
    assert nn.SoftmaxCrossEntropyWithLogits().reduction == "none"
    assert nn.SoftmaxCrossEntropyWithLogits().sparse is False
    assert nn.MSELoss().reduction == "mean"
    with pytest.raises(ShapeError, match="reduction"):
        nn.L1Loss(reduction="avg")
    with pytest.raises(ShapeError, match="labels"):
        nn.SoftmaxCrossEntropyWithLogits(sparse=True)(Tensor(np.zeros((3, 2))), Tensor(np.array([0, 1])))


@pytest.mark.parametrize("cls, formula", [(nn.MSELoss, lambda d: d * d), (nn.L1Loss, np.abs)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_losses(cls, formula, reduction):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    loss = cls(reduction=reduction)
    per = formula(x - y)
    expected = {"none": per, "mean": per.mean(), "sum": per.sum()}[reduction]
    np.testing.assert_allclose(loss(Tensor(x), Tensor(y)).asnumpy(), expected, rtol=1e-12)
    check_function(lambda a, b: loss(a, b), [x, y])


def test_with_loss_cell_adds_no_prefix():
    net = nn.Dense(3, 2)
    cell = nn.WithLossCell(net, nn.MSELoss())
    assert list(cell.parameters_dict()) == ["weight", "bias"]
    assert cell(Tensor(np.ones((2, 3), np.float32)), Tensor(np.zeros((2, 2), np.float32))).shape == ()
