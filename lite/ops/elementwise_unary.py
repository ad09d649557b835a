"""Unary elementwise math: the result has the input's shape and element type.

Specs (https://onnx.ai/onnx/operators/onnx__<Op>.html): Abs, Neg, Exp, Log, Sqrt, Reciprocal,
Floor, Ceil, Round, Sign, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh,
IsNaN, IsInf, Identity.

Later opsets of these operators only widen the accepted element types, so each is registered
once, at its first version. (Opset < 6 nodes may carry ``consumed_inputs``, a memory hint with
no effect on the result.)
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


def _float_math(function, X) -> np.ndarray:
    # Out-of-domain inputs (log(-1), acos(2)) give NaN as the spec allows, without warnings.
    X = np.asarray(X)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return np.asarray(function(X)).astype(X.dtype, copy=False)


@kernel("Abs", since=1)
def Abs(X):
    return np.abs(X)


@kernel("Neg", since=1)
def Neg(X):
    return np.negative(X)


@kernel("Exp", since=1)
def Exp(input):
    return _float_math(np.exp, input)


@kernel("Log", since=1)
def Log(input):
    return _float_math(np.log, input)


@kernel("Sqrt", since=1)
def Sqrt(X):
    return _float_math(np.sqrt, X)


@kernel("Reciprocal", since=1)
def Reciprocal(X):
    return _float_math(np.reciprocal, X)


@kernel("Floor", since=1)
def Floor(X):
    return np.floor(X)


@kernel("Ceil", since=1)
def Ceil(X):
    return np.ceil(X)


@kernel("Round", since=11)
def Round(X):
    """Round half to even, like ``numpy.round``."""
    return np.round(X)


@kernel("Sign", since=9)
def Sign(input):
    return np.sign(input)


@kernel("Sin", since=7)
def Sin(input):
    return _float_math(np.sin, input)


@kernel("Cos", since=7)
def Cos(input):
    return _float_math(np.cos, input)


@kernel("Tan", since=7)
def Tan(input):
    return _float_math(np.tan, input)


@kernel("Asin", since=7)
def Asin(input):
    return _float_math(np.arcsin, input)


@kernel("Acos", since=7)
def Acos(input):
    return _float_math(np.arccos, input)


@kernel("Atan", since=7)
def Atan(input):
    return _float_math(np.arctan, input)


@kernel("Sinh", since=9)
def Sinh(input):
    return _float_math(np.sinh, input)


@kernel("Cosh", since=9)
def Cosh(input):
    return _float_math(np.cosh, input)


@kernel("Asinh", since=9)
def Asinh(input):
    return _float_math(np.arcsinh, input)


@kernel("Acosh", since=9)
def Acosh(input):
    return _float_math(np.arccosh, input)


@kernel("Atanh", since=9)
def Atanh(input):
    return _float_math(np.arctanh, input)


@kernel("IsNaN", since=9)
def IsNaN(X):
    return np.isnan(X)


@kernel("IsInf", since=10)
def IsInf(X, *, detect_negative=1, detect_positive=1):
    X = np.asarray(X)
    if detect_negative and detect_positive:
        return np.isinf(X)
    if detect_negative:
        return np.isneginf(X)
    if detect_positive:
        return np.isposinf(X)
    return np.zeros(X.shape, dtype=np.bool_)


@kernel("Identity", since=1)
def Identity(input):
    return input
