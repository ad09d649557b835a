"""Activations, Softmax/LogSoftmax and element-wise arithmetic.

* ``ReLU``, ``Sigmoid``, ``Tanh`` and the unary math ops map one to one; ``ReLU6`` is
  ``Clip(0, 6)``; ``HSwish`` is ``x·relu6(x+3)/6`` (ONNX HardSwish); ``HSigmoid`` is
  ``relu6(x+3)/6`` (HardSigmoid alpha=1/6, beta=0.5); ``SiLU`` is ``x·sigmoid(x)`` (opset 17 has
  no Swish node).
* ``GeLU`` is MindSpore's tanh approximation ``0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³)))``
  (``nn.GELU(approximate=True)``), written out in ops that opset 17 has.
* ``Softmax(x, axis)`` (axis an int or a 1-tuple) and ``LogSoftmax(x, axis)`` normalize along
  one axis, as ONNX opset 13+ does.
* ``Add``/``Sub``/``Mul``/``Div``/``RealDiv`` and the scalar forms ``Adds``/``Subs``/``Muls``/``Divs``
  broadcast like numpy; a scalar constant takes the dtype of the tensor operand (MindSpore's
  implicit type promotion of Python numbers).
"""

from __future__ import annotations

import math

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import ConstValue, TensorValue, TranslationError, Value
from converter.mindspore.primitives._common import int_tuple

UNARY = {
    "ReLU": "Relu",
    "Sigmoid": "Sigmoid",
    "Tanh": "Tanh",
    "Abs": "Abs",
    "Neg": "Neg",
    "Exp": "Exp",
    "Log": "Log",
    "Sqrt": "Sqrt",
    "Rsqrt": None,
    "Reciprocal": "Reciprocal",
    "Erf": "Erf",
    "Floor": "Floor",
    "Ceil": "Ceil",
    "Sin": "Sin",
    "Cos": "Cos",
    "Softplus": "Softplus",
    "HSwish": "HardSwish",
}

BINARY = {
    "Add": "Add",
    "AddExt": "Add",
    "Adds": "Add",
    "Sub": "Sub",
    "SubExt": "Sub",
    "Subs": "Sub",
    "Mul": "Mul",
    "Muls": "Mul",
    "Div": "Div",
    "Divs": "Div",
    "RealDiv": "Div",
    "Pow": "Pow",
    "Maximum": "Max",
    "Minimum": "Min",
}


def _float_like(call: PrimitiveCall, x: TensorValue, value: float, suffix: str) -> TensorValue:
    return call.initializer(np.asarray(value, dtype=x.dtype or np.float32), suffix)


def unary(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    if call.primitive == "Rsqrt":
        return call.emit("Reciprocal", [call.step("Sqrt", [x], like=x)])
    return call.emit(UNARY[call.primitive], [x])


def relu6(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    return call.emit("Clip", [x, _float_like(call, x, 0.0, "zero"), _float_like(call, x, 6.0, "six")])


def hsigmoid(call: PrimitiveCall) -> Value:
    return call.emit("HardSigmoid", [call.tensor(0)], alpha=1.0 / 6.0, beta=0.5)


def silu(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    return call.emit("Mul", [x, call.step("Sigmoid", [x], like=x)])


def gelu(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    cube = call.step("Mul", [call.step("Mul", [x, x], like=x), x], like=x)
    inner = call.step("Add", [x, call.step("Mul", [cube, _float_like(call, x, 0.044715, "c")], like=x)], like=x)
    scaled = call.step("Mul", [inner, _float_like(call, x, math.sqrt(2.0 / math.pi), "k")], like=x)
    one_plus = call.step("Add", [call.step("Tanh", [scaled], like=x), _float_like(call, x, 1.0, "one")], like=x)
    half_x = call.step("Mul", [x, _float_like(call, x, 0.5, "half")], like=x)
    return call.emit("Mul", [half_x, one_plus])


def _axis(call: PrimitiveCall) -> int:
    axis = int_tuple(call.arg(1, "axis", "dim", default=-1), "axis")
    if len(axis) != 1:
        raise TranslationError(f"axis {axis} must name exactly one axis")
    return axis[0]


def softmax(call: PrimitiveCall) -> Value:
    return call.emit("Softmax", [call.tensor(0)], axis=_axis(call))


def log_softmax(call: PrimitiveCall) -> Value:
    return call.emit("LogSoftmax", [call.tensor(0)], axis=_axis(call))


def binary(call: PrimitiveCall) -> Value:
    if len(call.inputs) < 2:
        raise TranslationError(f"needs 2 inputs, has {len(call.inputs)}")
    left, right = call.inputs[0], call.inputs[1]
    if isinstance(left, ConstValue) and not isinstance(right, ConstValue):
        b = call.tensor(1)
        a = call.tensor(0, dtype=b.dtype)
    else:
        a = call.tensor(0)
        b = call.tensor(1, dtype=a.dtype if isinstance(right, ConstValue) else None)
    return call.emit(BINARY[call.primitive], [a, b])


TABLE = {
    **{name: unary for name in UNARY},
    **{name: binary for name in BINARY},
    "ReLU6": relu6,
    "HSigmoid": hsigmoid,
    "SiLU": silu,
    "GeLU": gelu,
    "Softmax": softmax,
    "LogSoftmax": log_softmax,
}
