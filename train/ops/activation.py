"""Activations, dense (MatMul + BiasAdd) and dropout."""

from __future__ import annotations

import math

import numpy as np

from train import _trace
from train.autograd import make_result
from train.ops import math as ops_math
from train.tensor import Tensor


def relu(x: Tensor) -> Tensor:
    result = np.maximum(x.data, 0)
    out = make_result(result, (x,), lambda g: (g * (x.data > 0),))
    _trace.record("Relu", [x], out)
    return out


def relu6(x: Tensor) -> Tensor:
    result = np.clip(x.data, 0, 6)
    out = make_result(result, (x,), lambda g: (g * ((x.data > 0) & (x.data < 6)),))
    _trace.record("Clip", [x, np.asarray(0, x.dtype), np.asarray(6, x.dtype)], out)
    return out


def sigmoid(x: Tensor) -> Tensor:
    result = 1.0 / (1.0 + np.exp(-x.data))
    out = make_result(result, (x,), lambda g: (g * result * (1.0 - result),))
    _trace.record("Sigmoid", [x], out)
    return out


def tanh(x: Tensor) -> Tensor:
    result = np.tanh(x.data)
    out = make_result(result, (x,), lambda g: (g * (1.0 - result * result),))
    _trace.record("Tanh", [x], out)
    return out


def gelu(x: Tensor, approximate: bool = True) -> Tensor:
    """``nn.GELU``: MindSpore defaults to the tanh approximation.

    Built from traced primitives, so export emits opset-17 nodes (Gelu itself is opset 20).
    """
    if approximate:
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * (tanh(inner) + 1.0) * 0.5
    return x * (ops_math.erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5


def dense(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` for 2-D ``x``; weight is ``(out, in)`` as MindSpore stores it."""

    def backward(g: np.ndarray) -> tuple:
        return (
            g @ weight.data if x.requires_grad else None,
            g.T @ x.data if weight.requires_grad else None,
            g.sum(axis=0) if bias is not None and bias.requires_grad else None,
        )

    result = x.data @ weight.data.T
    if bias is not None:
        result += bias.data
    parents = (x, weight) if bias is None else (x, weight, bias)
    out = make_result(result, parents, backward)
    _trace.record("Gemm", [x, weight, bias], out, transB=1)
    return out


def dropout(x: Tensor, p: float, rng: np.random.Generator) -> Tensor:
    """Training-mode inverted dropout: zero with probability ``p``, scale survivors by 1/(1-p)."""
    if p <= 0.0:
        return x
    mask = (rng.random(x.shape) >= p).astype(x.dtype) / (1.0 - p)
    return make_result(x.data * mask, (x,), lambda g: (g * mask,))
