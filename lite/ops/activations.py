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

import functools
import math

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import clip
from lite.ops.erf import ERFC_FIT, erf
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
    if X.dtype.kind == "f":
        # The clip ufunc with 0-d bounds: np.maximum runs 2-3x slower on float32 here (AVX2).
        low, high = _relu_bounds(X.dtype)
        out = None if allocate is np.empty else allocate(X.shape, X.dtype)
        return clip(X, low, high, out=out)
    zero = np.zeros((), dtype=X.dtype)
    if allocate is np.empty or X.dtype.kind != "i":
        return np.maximum(X, zero)
    return np.maximum(X, zero, out=allocate(X.shape, X.dtype))


@functools.lru_cache(maxsize=8)
def _relu_bounds(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    bounds = np.zeros((), dtype), np.full((), np.inf, dtype)
    for bound in bounds:
        bound.flags.writeable = False
    return bounds


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


# HardSwish's constants (1/6, 1/2, 0, 1) as scalars of float32 and float64: made once, not on
# every call (four scalar constructions were a third of a call on LeViT's 16x64 activations).
_HARD_SWISH = {np.dtype(kind): tuple(kind(value) for value in (1 / 6, 0.5, 0, 1)) for kind in (np.float32, np.float64)}


@kernel("HardSwish", since=14)
def HardSwish(X):
    X = np.asarray(X)
    constants = _HARD_SWISH.get(X.dtype)
    if constants is not None and X.ndim:
        # The same operations as below, in place into one fresh array and with the clip ufunc
        # (np.clip's Python layer costs as much as a pass over LeViT's 16x128 activations).
        sixth, half, zero, one = constants
        gate = np.multiply(X, sixth)
        gate += half
        clip(gate, zero, one, out=gate)
        gate *= X
        return gate
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
def Gelu(X, *, approximate="none", allocate=np.empty):
    X = np.asarray(X)
    if approximate == "none":
        if X.dtype.kind == "f" and X.dtype.itemsize <= 4:
            return _like(_gelu_float32(X.astype(np.float32, copy=False), allocate), X)
        wide = X.astype(np.float64)
        return _like(0.5 * wide * (1 + erf(wide / math.sqrt(2))), X)
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (X + 0.044715 * X * X * X)
        return _like(0.5 * X * (1 + np.tanh(inner)), X)
    raise KernelError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _gelu_float32(x: np.ndarray, allocate=np.empty) -> np.ndarray:
    """x * (1 + erf(x / sqrt(2))) / 2 in float32 as ``relu(x) - |x| * erfc(|x| / sqrt(2)) / 2``
    (the same value on either side of 0, with no cancellation in the negative tail: the gate is
    erfc's relative-accuracy fit alone, never 1 - erf). erfc comes from the Chebyshev fit of
    lite.ops.erf, ``t * exp(poly(t) - z^2)`` with ``t = 1 / (1 + z/2)``; the nine powers of t
    (by doubling, four products) and ``|x|^2`` are rows of one matrix, and a single
    matrix-vector product with the fit's coefficients (and -1/2 for ``|x|^2``, ln 1/2 folded
    into the constant) sums the exponent. 16 passes over the tensor instead of Horner's 30: on
    a small transformer's 16x256 activations most of the time is numpy's per-call overhead.
    Large tensors go through in chunks of ``_GELU_CHUNK`` elements (the matrix is 12 rows, the last the exponent). The
    output and the matrix come from ``allocate`` (the engine's arena: fresh megabytes of scratch
    on every call cost page faults, milliseconds on a busy machine)."""
    if not x.flags.c_contiguous:
        # A convolution's channels-last output: computed in its memory order and handed on in
        # that layout (lite.ops._layout, imported only here), not copied into the usual one first.
        from lite.ops._layout import channels_first_order, channels_last_order, is_channels_last

        if is_channels_last(x):
            order = channels_last_order(x.ndim)
            return _gelu_float32(x.transpose(order), allocate).transpose(channels_first_order(x.ndim))
    flat = x.reshape(-1)
    if flat.size <= _GELU_SMALL:  # the allocator's own free lists serve these as fast as the arena
        y = np.empty(flat.size, np.float32)
        _gelu_float32_into(flat, y, np.empty((12, flat.size), np.float32))
        return y.reshape(x.shape)
    y = allocate((flat.size,), np.float32)
    basis = allocate((12, min(flat.size, _GELU_CHUNK)), np.float32)
    for start in range(0, flat.size, _GELU_CHUNK):
        chunk = flat[start : start + _GELU_CHUNK]
        _gelu_float32_into(chunk, y[start : start + _GELU_CHUNK], basis[:, : chunk.size])
    return y.reshape(x.shape)


def _gelu_float32_into(x: np.ndarray, y: np.ndarray, basis: np.ndarray) -> None:
    t, magnitude = basis[0], basis[10]
    np.abs(x, out=magnitude)
    # A finite bound keeps inf out of the products (gelu(inf) = inf - 0); NaN passes through.
    clip(magnitude, np.float32(0), np.float32(1e18), out=magnitude)
    # t = 1 / (1 + |x| / (2 sqrt 2)) as k / (k + |x|), k = 2 sqrt 2: one pass fewer.
    np.add(magnitude, _GELU_K, out=t)
    np.divide(_GELU_K, t, out=t)
    np.multiply(t, t, out=basis[1])
    np.multiply(basis[0:2], basis[1], out=basis[2:4])
    np.multiply(basis[0:4], basis[3], out=basis[4:8])
    np.multiply(basis[7], t, out=basis[8])
    np.multiply(magnitude, magnitude, out=basis[9])
    exponent = np.matmul(_GELU_EXPONENT, basis[:10], out=basis[11])
    exponent += _GELU_CONSTANT
    np.exp(exponent, out=exponent)
    exponent *= t
    exponent *= magnitude
    clip(x, np.float32(0), np.float32(np.inf), out=y)
    y -= exponent


# Row weights of _gelu_float32's matrix: the erfc fit's coefficients of t^1..t^9, then -1/2 for
# |x|^2 (z^2 = |x|^2 / 2); its constant term carries ln(1/2) for the final halving.
_GELU_EXPONENT = np.array(list(ERFC_FIT[1:]) + [-0.5], np.float32)
_GELU_CONSTANT = np.float32(ERFC_FIT[0] + math.log(0.5))
_GELU_K = np.float32(2 * math.sqrt(2))
_GELU_CHUNK = 1 << 16
# Up to this many elements (a 16x128 activation) the scratch matrix, under 128 KiB, is numpy's own.
_GELU_SMALL = 2560


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
