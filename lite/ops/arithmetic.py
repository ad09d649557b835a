"""Elementwise arithmetic with numpy broadcasting: Add, Sub, Mul, Div, Pow, Mod.

Specs: https://onnx.ai/onnx/operators/onnx__Add.html, onnx__Sub.html, onnx__Mul.html,
onnx__Div.html, onnx__Pow.html, onnx__Mod.html.

From opset 7 these broadcast like numpy. Before that they took ``broadcast``/``axis``
attributes (see :func:`lite.ops._helpers.legacy_broadcast`); the ``_v1`` kernels implement
that form. Results keep the input element type: integer Div truncates toward zero as in C, and
Pow returns the base's type whatever the exponent's.
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops._helpers import broadcast_shape, legacy_broadcast
from lite.ops._layout import empty_channels_last, is_channels_last
from lite.ops.registry import SMALL_ARRAY_BYTES, kernel


def _same_type(result: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(result).astype(like.dtype, copy=False)


def _binary(ufunc: np.ufunc, A, B, allocate) -> np.ndarray:
    """``ufunc(A, B)`` into a buffer from ``allocate`` (the engine's arena) when the operands
    share a numeric type, as ONNX requires; any other mix takes numpy's promotion, then A's type.
    The buffer is channels-last when the operands of the output's shape are (lite.ops._layout)."""
    A = np.asarray(A)
    B = np.asarray(B)
    if A.dtype != B.dtype or A.dtype.kind not in "fiub" or allocate is np.empty:
        return _same_type(ufunc(A, B), A)
    shape = broadcast_shape(A.shape, B.shape)
    if math.prod(shape) * A.dtype.itemsize < SMALL_ARRAY_BYTES:
        return ufunc(A, B)
    full = [operand for operand in (A, B) if operand.shape == shape]
    if full and all(is_channels_last(operand) for operand in full):
        return ufunc(A, B, out=empty_channels_last(shape, A.dtype, allocate))
    return ufunc(A, B, out=allocate(shape, A.dtype))


@kernel("Add", since=7)
def Add(A, B, *, allocate=np.empty):
    return _binary(np.add, A, B, allocate)


@kernel("Sub", since=7)
def Sub(A, B, *, allocate=np.empty):
    return _binary(np.subtract, A, B, allocate)


@kernel("Mul", since=7)
def Mul(A, B, *, allocate=np.empty):
    return _binary(np.multiply, A, B, allocate)


@kernel("Div", since=7)
def Div(A, B, *, allocate=np.empty):
    A = np.asarray(A)
    B = np.asarray(B)
    if A.dtype.kind in "iu":
        return _truncating_divide(A, B)
    return _binary(np.divide, A, B, allocate)


def _truncating_divide(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    # numpy's // floors; C (and ONNX) truncate. They differ when the remainder is non-zero
    # and the operands have opposite signs. Division by zero yields 0 instead of trapping.
    with np.errstate(divide="ignore", invalid="ignore"):
        quotient = np.floor_divide(A, B)
        remainder = np.remainder(A, B)
    if A.dtype.kind == "i":
        quotient = quotient + ((remainder != 0) & ((A < 0) != (B < 0)))
    return _same_type(quotient, A)


@kernel("Pow", since=7)
def Pow(X, Y):
    X = np.asarray(X)
    Y = np.asarray(Y)
    if X.dtype.kind in "iu" and Y.dtype.kind in "iu":
        return _integer_power(X, Y)
    if X.dtype.kind in "iu":
        # Integer base, float exponent: compute in double and truncate like a C cast.
        with np.errstate(invalid="ignore", over="ignore"):
            return _same_type(np.power(X.astype(np.float64), Y), X)
    if Y.size == 1 and X.dtype.kind == "f" and Y.ndim <= X.ndim:
        power = _SMALL_POWERS.get(float(Y.reshape(())))
        if power is not None:
            return power(X)
    return _same_type(np.power(X, Y), X)


# Float bases with these scalar exponents as products (GPT-2's tanh GELU cubes its input):
# np.power runs powf per element, ten times as long. Products round up to one ulp apart.
_SMALL_POWERS = {
    1.0: lambda x: x.copy(),
    2.0: lambda x: np.multiply(x, x),
    3.0: lambda x: np.multiply(np.multiply(x, x), x),
}


def _integer_power(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    # numpy refuses negative integer exponents. x ** -n truncates to 0 except for |x| == 1
    # (1 stays 1, -1 alternates sign); 0 ** -n is undefined and gives 0 here.
    negative = Y < 0
    result = np.power(X, np.where(negative, 0, Y).astype(X.dtype))
    if np.any(negative):
        odd = (np.abs(Y) % 2) == 1
        reciprocal = np.where(X == 1, 1, np.where(X == -1, np.where(odd, -1, 1), 0))
        result = np.where(negative, reciprocal, result)
    return _same_type(result, X)


@kernel("Mod", since=10)
def Mod(A, B, *, fmod=0):
    """``fmod=0``: sign of the divisor (Python ``%``); ``fmod=1``: sign of the dividend (C fmod)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.fmod(A, B) if fmod else np.mod(A, B)
    return _same_type(result, np.asarray(A))


# --- opset < 7: explicit broadcast attribute ----------------------------------------------------


@kernel("Add", since=1)
def Add_v1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    return Add(A, legacy_broadcast("Add", A, B, broadcast, axis))


@kernel("Sub", since=1)
def Sub_v1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    return Sub(A, legacy_broadcast("Sub", A, B, broadcast, axis))


@kernel("Mul", since=1)
def Mul_v1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    return Mul(A, legacy_broadcast("Mul", A, B, broadcast, axis))


@kernel("Div", since=1)
def Div_v1(A, B, *, broadcast=0, axis=None, consumed_inputs=None):
    return Div(A, legacy_broadcast("Div", A, B, broadcast, axis))


@kernel("Pow", since=1)
def Pow_v1(X, Y, *, broadcast=0, axis=None):
    return Pow(X, legacy_broadcast("Pow", X, Y, broadcast, axis))
