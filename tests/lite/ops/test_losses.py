"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._checks_domains import check, normal, rng, run_kernel
from tests.lite.ops._reference import check_against_onnxruntime

SHAPES = [(4, 3), (2, 3, 5), (2, 4, 2, 3)]


def labels(shape, classes, ignore_index=None):
    target = rng.integers(0, classes, (shape[0],) + shape[2:]).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index
    return target


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, -1, 1])
def test_negative_log_likelihood_loss(shape, reduction, weighted, ignore_index):
    classes = shape[1]
    inputs = [normal(*shape), labels(shape, classes, ignore_index), normal(classes) if weighted else None]
    attributes = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = ignore_index
    if ignore_index == -1 and not weighted and reduction == "mean":
        # onnx.reference averages over every sample when ignore_index is -1 (and only then);
        # the spec and ONNX Runtime average over the samples not ignored.
        check_against_onnxruntime("NegativeLogLikelihoodLoss", inputs, attributes, opset=13, rtol=1e-5, atol=1e-6)
    else:
        check("NegativeLogLikelihoodLoss", inputs, attributes, opset=22)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, -5])
def test_softmax_cross_entropy_loss(shape, reduction, weighted, ignore_index):
    classes = shape[1]
    inputs = [normal(*shape), labels(shape, classes, ignore_index), normal(classes) if weighted else None]
    attributes = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = ignore_index
    check("SoftmaxCrossEntropyLoss", inputs, attributes, opset=13, output_count=2)


def test_losses_keep_double():
    inputs = [normal(3, 4, dtype=np.float64), labels((3, 4), 4)]
    loss, log_prob = run_kernel("SoftmaxCrossEntropyLoss", inputs, {}, opset=13, output_count=2)
    assert loss.dtype == log_prob.dtype == np.float64 and loss.shape == ()


def test_out_of_range_label_is_an_error():
    from lite.errors import KernelError

    with pytest.raises(KernelError, match="target values"):
        run_kernel("NegativeLogLikelihoodLoss", [normal(2, 3), np.array([0, 3])], {}, opset=13)
