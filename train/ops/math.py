"""Elementwise arithmetic, matmul and reductions, each forward next to its backward."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from train import _trace
from train.autograd import make_result, unbroadcast
from train.tensor import Tensor


def as_tensor(value: Any, like: Tensor | None = None) -> Tensor:
    """A Tensor for ``value``; Python numbers take the dtype of ``like`` so float32 stays float32."""
    if isinstance(value, Tensor):
        return value
    if like is not None and not isinstance(value, np.ndarray):
        return Tensor(np.asarray(value, dtype=like.dtype))
    return Tensor(value)


def _pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, as_tensor(b, a)
    b = as_tensor(b)
    return as_tensor(a, b), b


def add(a: Any, b: Any) -> Tensor:
    a, b = _pair(a, b)

    def backward(g: np.ndarray) -> tuple:
        return (
            unbroadcast(g, a.shape) if a.requires_grad else None,
            unbroadcast(g, b.shape) if b.requires_grad else None,
        )

    out = make_result(a.data + b.data, (a, b), backward)
    _trace.record("Add", [a, b], out)
    return out


def sub(a: Any, b: Any) -> Tensor:
    a, b = _pair(a, b)

    def backward(g: np.ndarray) -> tuple:
        return (
            unbroadcast(g, a.shape) if a.requires_grad else None,
            unbroadcast(-g, b.shape) if b.requires_grad else None,
        )

    out = make_result(a.data - b.data, (a, b), backward)
    _trace.record("Sub", [a, b], out)
    return out


def mul(a: Any, b: Any) -> Tensor:
    a, b = _pair(a, b)

    def backward(g: np.ndarray) -> tuple:
        return (
            unbroadcast(g * b.data, a.shape) if a.requires_grad else None,
            unbroadcast(g * a.data, b.shape) if b.requires_grad else None,
        )

    out = make_result(a.data * b.data, (a, b), backward)
    _trace.record("Mul", [a, b], out)
    return out


def div(a: Any, b: Any) -> Tensor:
    a, b = _pair(a, b)

    def backward(g: np.ndarray) -> tuple:
        return (
            unbroadcast(g / b.data, a.shape) if a.requires_grad else None,
            unbroadcast(-g * a.data / (b.data * b.data), b.shape) if b.requires_grad else None,
        )

    out = make_result(a.data / b.data, (a, b), backward)
    _trace.record("Div", [a, b], out)
    return out


def neg(a: Tensor) -> Tensor:
    out = make_result(-a.data, (a,), lambda g: (-g,))
    _trace.record("Neg", [a], out)
    return out


def power(a: Tensor, exponent: float) -> Tensor:
    def backward(g: np.ndarray) -> tuple:
        return (g * exponent * a.data ** (exponent - 1),)

    out = make_result(a.data**exponent, (a,), backward)
    _trace.record("Pow", [a, np.asarray(exponent, dtype=a.dtype)], out)
    return out


def exp(a: Tensor) -> Tensor:
    result = np.exp(a.data)
    out = make_result(result, (a,), lambda g: (g * result,))
    _trace.record("Exp", [a], out)
    return out


def log(a: Tensor) -> Tensor:
    out = make_result(np.log(a.data), (a,), lambda g: (g / a.data,))
    _trace.record("Log", [a], out)
    return out


def sqrt(a: Tensor) -> Tensor:
    result = np.sqrt(a.data)
    out = make_result(result, (a,), lambda g: (g * 0.5 / result,))
    _trace.record("Sqrt", [a], out)
    return out


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(a: Tensor) -> Tensor:
    """The Gauss error function (ONNX ``Erf``); exact, through :func:`math.erf`."""
    scale = 2.0 / math.sqrt(math.pi)

    def backward(g: np.ndarray) -> tuple:
        return (g * (scale * np.exp(-a.data * a.data)).astype(a.dtype),)

    out = make_result(_erf(a.data).astype(a.dtype), (a,), backward)
    _trace.record("Erf", [a], out)
    return out


def cast(a: Tensor, dtype: Any) -> Tensor:
    source = a.dtype
    out = make_result(a.data.astype(dtype), (a,), lambda g: (g.astype(source),))
    return out


def matmul(a: Any, b: Any) -> Tensor:
    """``a @ b`` for 2-D operands (``ops.MatMul``)."""
    a, b = _pair(a, b)

    def backward(g: np.ndarray) -> tuple:
        return (g @ b.data.T if a.requires_grad else None, a.data.T @ g if b.requires_grad else None)

    out = make_result(a.data @ b.data, (a, b), backward)
    _trace.record("MatMul", [a, b], out)
    return out


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted(a % ndim for a in axis))


def reduce_sum(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    axes = _axes(axis, a.ndim)

    def backward(g: np.ndarray) -> tuple:
        if not keepdims:
            g = np.expand_dims(g, axes)
        return (np.broadcast_to(g, a.shape),)

    out = make_result(np.asarray(a.data.sum(axis=axes, keepdims=keepdims)), (a,), backward)
    _trace.record("ReduceSum", [a, np.asarray(axes, dtype=np.int64)], out, keepdims=int(keepdims))
    return out


def reduce_mean(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    axes = _axes(axis, a.ndim)
    count = int(np.prod([a.shape[i] for i in axes]))

    def backward(g: np.ndarray) -> tuple:
        if not keepdims:
            g = np.expand_dims(g, axes)
        return (np.broadcast_to(g / count, a.shape),)

    out = make_result(np.asarray(a.data.mean(axis=axes, keepdims=keepdims)), (a,), backward)
    _trace.record("ReduceMean", [a], out, axes=list(axes), keepdims=int(keepdims))
    return out
