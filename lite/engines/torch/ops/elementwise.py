"""Elementwise lowerings: activations, arithmetic, comparisons, Cast, Where.

Semantics follow https://onnx.ai/onnx/operators/ (numpy broadcasting; integer Div truncates
toward zero; Pow keeps the type of its base). Host values (see :mod:`._values`) are computed in
Python when every input is one, else converted like the tensor operand.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from lite.engines.torch.ops._values import (
    common,
    host_elementwise,
    host_scalar,
    is_host,
    to_tensor,
    trunc_div,
)
from lite.engines.torch.ops.dtypes import torch_dtype
from lite.engines.torch.ops.registry import lowering


# -- activations (also the fused_activation attribute, lite/format/fused_activation.py) ---------
def apply_activation(x: torch.Tensor, name: str, params: Sequence[float]) -> torch.Tensor:
    """The converter-fused activation ``name`` applied to ``x``."""
    if name == "Relu":
        return torch.relu(x)
    if name == "Clip":
        return torch.clamp(x, params[0], params[1])
    if name == "LeakyRelu":
        return F.leaky_relu(x, params[0])
    if name == "Sigmoid":
        return torch.sigmoid(x)
    if name == "HardSigmoid":
        return torch.clamp(x * params[0] + params[1], 0, 1)
    if name == "HardSwish":
        return F.hardswish(x)
    if name == "Silu":
        return F.silu(x)
    if name == "Tanh":
        return torch.tanh(x)
    raise ValueError(f"unknown fused activation {name!r}")


def activate(y: torch.Tensor, fused_activation: tuple[str, Sequence[float]] | None) -> torch.Tensor:
    return y if fused_activation is None else apply_activation(y, *fused_activation)


@lowering("Relu")
def Relu(X):
    return torch.relu(X)


@lowering("LeakyRelu")
def LeakyRelu(X, *, alpha=0.01):
    return F.leaky_relu(X, alpha)


@lowering("PRelu")
def PRelu(X, slope):
    slope = to_tensor(slope, X)
    return torch.where(X >= 0, X, X * slope)


@lowering("Elu")
def Elu(X, *, alpha=1.0):
    return F.elu(X, alpha)


@lowering("Selu")
def Selu(X, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return gamma * torch.where(X > 0, X, alpha * torch.expm1(X))


@lowering("Sigmoid")
def Sigmoid(X):
    return torch.sigmoid(X)


@lowering("HardSigmoid")
def HardSigmoid(X, *, alpha=0.2, beta=0.5):
    return torch.clamp(X * alpha + beta, 0, 1)


@lowering("HardSwish")
def HardSwish(X):
    return F.hardswish(X)


@lowering("Tanh")
def Tanh(X):
    return torch.tanh(X)


@lowering("Softplus")
def Softplus(X):
    return F.softplus(X)


@lowering("Softsign")
def Softsign(X):
    return X / (1 + X.abs())


@lowering("Mish")
def Mish(X):
    return F.mish(X)


@lowering("Gelu", since=20)
def Gelu(X, *, approximate="none"):
    return F.gelu(X, approximate=approximate)


@lowering("Clip", since=1)
def Clip_1(X, *, min=-3.4028234663852886e38, max=3.4028234663852886e38):
    return torch.clamp(X, min, max)


@lowering("Clip", since=11, static=(1, 2))
def Clip(X, low=None, high=None):
    # Bounds read on the host keep torch.clamp scalar (one fused kernel, any dtype).
    low = None if low is None else host_scalar(low)
    high = None if high is None else host_scalar(high)
    if is_host(X):
        return host_elementwise(lambda v: _clip_host(v, low, high), X)
    if low is None and high is None:
        return X
    return torch.clamp(X, low, high)


def _clip_host(value, low, high):
    if low is not None:
        value = max(value, low)
    return value if high is None else min(value, high)




def _softmax_like(X, axis, opset, fn):
    if opset >= 13:
        return fn(X, axis)
    # Before opset 13 the input is coerced to 2-D at ``axis`` and normalised along the second axis.
    shape = X.shape
    axis = axis + X.dim() if axis < 0 else axis
    return fn(X.reshape(math.prod(shape[:axis]), -1), 1).reshape(shape)


@lowering("Softmax")
def Softmax(X, *, axis=None, opset):
    axis = (-1 if opset >= 13 else 1) if axis is None else axis
    return _softmax_like(X, axis, opset, lambda x, dim: torch.softmax(x, dim))


@lowering("LogSoftmax")
def LogSoftmax(X, *, axis=None, opset):
    axis = (-1 if opset >= 13 else 1) if axis is None else axis
    return _softmax_like(X, axis, opset, lambda x, dim: torch.log_softmax(x, dim))


# -- unary math ----------------------------------------------------------------------------------
def _unary(op_type: str, fn) -> None:
    lowering(op_type)(lambda X: fn(X))


for _op, _fn in {"Erf": torch.erf, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Floor": torch.floor,
                 "Ceil": torch.ceil, "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Atan": torch.atan,
                 "Reciprocal": torch.reciprocal, "Round": torch.round, "IsNaN": torch.isnan}.items():
    _unary(_op, _fn)


@lowering("Abs")
def Abs(X):
    return host_elementwise(abs, X) if is_host(X) else torch.abs(X)


@lowering("Neg")
def Neg(X):
    return host_elementwise(operator.neg, X) if is_host(X) else torch.neg(X)


@lowering("Sign")
def Sign(X):
    return torch.sign(X)


@lowering("Not")
def Not(X):
    return host_elementwise(operator.not_, X) if is_host(X) else torch.logical_not(X)


@lowering("Identity")
def Identity(X):
    return X


@lowering("Dropout")
def Dropout(data, ratio=None, training_mode=None, *, seed=None, output_count):
    # Inference: the output is the input; the optional mask is all true.
    if output_count > 1:
        return data, torch.ones_like(data, dtype=torch.bool)
    return data


# -- binary --------------------------------------------------------------------------------------
def _binary(a: Any, b: Any, tensor_fn, host_fn) -> Any:
    if is_host(a) and is_host(b):
        return host_elementwise(host_fn, a, b)
    a, b = common([a, b])
    return tensor_fn(a, b)


@lowering("Add")
def Add(A, B):
    return _binary(A, B, torch.add, operator.add)


@lowering("Sub")
def Sub(A, B):
    return _binary(A, B, torch.sub, operator.sub)


@lowering("Mul")
def Mul(A, B):
    return _binary(A, B, torch.mul, operator.mul)


def _divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


@lowering("Div")
def Div(A, B):
    host_div = lambda x, y: x / y if isinstance(x, float) or isinstance(y, float) else trunc_div(x, y)
    return _binary(A, B, _divide, host_div)


@lowering("Pow")
def Pow(X, Y):
    if is_host(X) and is_host(Y):
        return host_elementwise(operator.pow, X, Y)
    X = to_tensor(X, Y)
    if is_host(Y) and not isinstance(Y, list):
        return torch.pow(X, Y).to(X.dtype)
    return torch.pow(X, to_tensor(Y, X)).to(X.dtype)


@lowering("Mod")
def Mod(A, B, *, fmod=0):
    if fmod:
        return _binary(A, B, torch.fmod, math.fmod)
    return _binary(A, B, torch.remainder, operator.mod)


def _variadic(values: Sequence[Any], tensor_fn, host_fn) -> Any:
    result = values[0]
    for value in values[1:]:
        result = _binary(result, value, tensor_fn, host_fn)
    return result


@lowering("Max")
def Max(*data):
    return _variadic(data, torch.maximum, max)


@lowering("Min")
def Min(*data):
    return _variadic(data, torch.minimum, min)


@lowering("Sum")
def Sum(*data):
    return _variadic(data, torch.add, operator.add)


@lowering("Mean")
def Mean(*data):
    return _variadic(data, torch.add, operator.add) / len(data)


def _comparison(op_type: str, tensor_fn, host_fn) -> None:
    lowering(op_type)(lambda A, B: _binary(A, B, tensor_fn, host_fn))


for _op, (_tensor_fn, _host_fn) in {
    "Equal": (torch.eq, operator.eq), "Less": (torch.lt, operator.lt), "Greater": (torch.gt, operator.gt),
    "LessOrEqual": (torch.le, operator.le), "GreaterOrEqual": (torch.ge, operator.ge),
    "And": (torch.logical_and, lambda x, y: bool(x and y)), "Or": (torch.logical_or, lambda x, y: bool(x or y)),
    "Xor": (torch.logical_xor, lambda x, y: bool(x) != bool(y)),
}.items():
    _comparison(_op, _tensor_fn, _host_fn)


@lowering("Where")
def Where(condition, X, Y):
    if is_host(condition) and is_host(X) and is_host(Y):
        return host_elementwise(lambda c, x, y: x if c else y, condition, X, Y)
    like = X if not is_host(X) else Y if not is_host(Y) else None
    if like is None:
        X, Y = torch.tensor(X, device=condition.device), torch.tensor(Y, device=condition.device)
    else:
        X, Y = to_tensor(X, like), to_tensor(Y, like)
    return torch.where(to_tensor(condition, X, dtype=torch.bool), X, Y)


# -- types ---------------------------------------------------------------------------------------
_HOST_CASTS = {torch.bool: bool, torch.float16: float, torch.float32: float, torch.float64: float}


@lowering("Cast")
def Cast(input, *, to, saturate=1, round_mode="up", float_type):
    dtype = torch_dtype(to, float_type)
    if is_host(input):
        convert = _HOST_CASTS.get(dtype, int)
        return host_elementwise(convert, input)
    return input.to(dtype)


@lowering("CastLike")
def CastLike(input, target_type, *, saturate=1, round_mode="up"):
    if is_host(target_type):
        return input
    return to_tensor(input, target_type).to(target_type.dtype)
