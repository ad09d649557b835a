"""Activation functions, elementwise; the result keeps the input's shape and element type.

Specs (https://onnx.ai/onnx/operators/onnx__<Op>.html): Relu, LeakyRelu, PRelu, Elu, Selu,
Celu, Sigmoid, HardSigmoid, HardSwish, Softplus, Softsign, Tanh, Gelu, Mish, ThresholdedRelu,
Shrink, Swish.

Later opsets of these operators only widen the accepted element types (PRelu's slope became
unidirectionally broadcast in opset 7, which numpy broadcasting also covers), so each is
registered at its first version; Selu's defaults changed in opset 6 and it has two kernels.
Formulas avoid overflow: sigmoid and softplus never exponentiate a large positive number.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import KernelError
from lite.ops.erf import erf, erfc_float32_of_magnitude
from lite.ops.fused_activation import sigmoid
from lite.ops.registry import kernel


def _like(result, X: np.ndarray) -> np.ndarray:
    return np.asarray(result).astype(X.dtype, copy=False)


def _sigmoid(X: np.ndarray) -> np.ndarray:
    return sigmoid(X if X.dtype.kind == "f" else X.astype(np.float64))


def _softplus(X: np.ndarray) -> np.ndarray:
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
    return np.maximum(X, 0) + np.log1p(np.exp(-np.abs(X)))


@kernel("Relu", since=1)
def Relu(X, *, allocate=np.empty):
    X = np.asarray(X)
    zero = np.zeros((), dtype=X.dtype)
    if allocate is np.empty or X.dtype.kind not in "fi":
        return np.maximum(X, zero)
    return np.maximum(X, zero, out=allocate(X.shape, X.dtype))


@kernel("LeakyRelu", since=1)
def LeakyRelu(X, *, alpha=0.01):
    X = np.asarray(X)
    return _like(np.where(X >= 0, X, X * alpha), X)


@kernel("PRelu", since=1)
def PRelu_1(X, slope):
    """Before opset 7 a 1-D slope of size C is per channel (axis 1), whatever X's rank.

    https://github.com/onnx/onnx/blob/main/docs/Changelog.md#PRelu-6
    """
    X, slope = np.asarray(X), np.asarray(slope)
    if slope.ndim == 1 and X.ndim >= 2 and slope.size == X.shape[1] and slope.size > 1:
        slope = slope.reshape((-1,) + (1,) * (X.ndim - 2))
    return _like(np.where(X < 0, X * slope, X), X)


@kernel("PRelu", since=7)
def PRelu(X, slope):
    """Slope broadcasts to X unidirectionally (numpy rules). https://onnx.ai/onnx/operators/onnx__PRelu.html"""
    X = np.asarray(X)
    return _like(np.where(X < 0, X * slope, X), X)


@kernel("Elu", since=1)
def Elu(X, *, alpha=1.0):
    X = np.asarray(X)
    return _like(np.where(X >= 0, X, alpha * np.expm1(np.minimum(X, 0))), X)


@kernel("Selu", since=6)
def Selu(X, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    X = np.asarray(X)
    return _like(gamma * np.where(X > 0, X, alpha * np.expm1(np.minimum(X, 0))), X)


@kernel("Selu", since=1)
def Selu_v1(X, *, alpha=1.6732, gamma=1.0507, consumed_inputs=None):
    return Selu(X, alpha=alpha, gamma=gamma)


@kernel("Celu", since=12)
def Celu(X, *, alpha=1.0):
    X = np.asarray(X)
    negative_part = alpha * np.expm1(np.minimum(X, 0) / alpha)
    return _like(np.maximum(X, 0) + negative_part, X)


@kernel("Sigmoid", since=1)
def Sigmoid(X):
    X = np.asarray(X)
    return _like(_sigmoid(X), X)


@kernel("HardSigmoid", since=1)
def HardSigmoid(X, *, alpha=0.2, beta=0.5):
    X = np.asarray(X)
    return _like(np.clip(X * alpha + beta, 0, 1), X)


@kernel("HardSwish", since=14)
def HardSwish(X):
    X = np.asarray(X)
    return _like(X * np.clip(X * (1 / 6) + 0.5, 0, 1), X)


@kernel("Softplus", since=1)
def Softplus(X):
    X = np.asarray(X)
    return _like(_softplus(X), X)


@kernel("Softsign", since=1)
def Softsign(input):
    input = np.asarray(input)
    return _like(input / (1 + np.abs(input)), input)


@kernel("Tanh", since=1)
def Tanh(input):
    return np.tanh(input)


@kernel("Gelu", since=20)
def Gelu(X, *, approximate="none"):
    X = np.asarray(X)
    if approximate == "none":
        if X.dtype.kind == "f" and X.dtype.itemsize <= 4:
            return _like(_gelu_float32(X.astype(np.float32, copy=False)), X)
        wide = X.astype(np.float64)
        return _like(0.5 * wide * (1 + erf(wide / math.sqrt(2))), X)
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (X + 0.044715 * X * X * X)
        return _like(0.5 * X * (1 + np.tanh(inner)), X)
    raise KernelError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _gelu_float32(x: np.ndarray) -> np.ndarray:
    """x * (1 + erf(x / sqrt(2))) / 2 with the gate taken from erfc alone: 1 + erf(z) is
    erfc(-z), that is erfc(|z|) for z < 0 and 2 - erfc(|z|) otherwise. No small-|z| series is
    needed (the gate is near 1 there, where erfc's fit is accurate), which halves the passes over
    the tensor, and negative inputs keep erfc's relative accuracy instead of losing it to 1 - erf."""
    magnitude = np.abs(x)
    magnitude *= np.float32(1 / math.sqrt(2))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # -inf * erfc(inf) is nan, as in the spec's formula
        fit = erfc_float32_of_magnitude(magnitude)
        gate = np.subtract(np.float32(2.0), fit, out=magnitude)
        np.copyto(gate, fit, where=np.signbit(x))
        gate *= x
    gate *= np.float32(0.5)
    return gate


@kernel("Mish", since=18)
def Mish(X):
    X = np.asarray(X)
    return _like(X * np.tanh(_softplus(X)), X)


@kernel("ThresholdedRelu", since=10)
def ThresholdedRelu(X, *, alpha=1.0):
    X = np.asarray(X)
    return _like(np.where(X > alpha, X, 0), X)


@kernel("Shrink", since=9)
def Shrink(input, *, bias=0.0, lambd=0.5):
    input = np.asarray(input)
    shrunk = np.where(input < -lambd, input + bias, np.where(input > lambd, input - bias, 0))
    return _like(shrunk, input)


@kernel("Swish", since=24)
def Swish(X, *, alpha=1.0):
    X = np.asarray(X)
    return _like(X * _sigmoid(X * alpha), X)
