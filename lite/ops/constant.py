"""Constant and ConstantOfShape.

Specs: https://onnx.ai/onnx/operators/onnx__Constant.html, onnx__ConstantOfShape.html.

Constant has exactly one of: ``value`` (a tensor), or from opset 12 ``value_float`` /
``value_floats`` (float32), ``value_int`` / ``value_ints`` (int64), ``value_string`` /
``value_strings`` (strings). ``sparse_value`` (opset 11) is not supported here.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops._helpers import int_list
from lite.ops.registry import kernel


@kernel("Constant", since=1)
def Constant(
    *,
    value=None,
    sparse_value=None,
    value_float=None,
    value_floats=None,
    value_int=None,
    value_ints=None,
    value_string=None,
    value_strings=None,
):
    given = {
        "value": value,
        "sparse_value": sparse_value,
        "value_float": value_float,
        "value_floats": value_floats,
        "value_int": value_int,
        "value_ints": value_ints,
        "value_string": value_string,
        "value_strings": value_strings,
    }
    present = [name for name, v in given.items() if v is not None]
    if len(present) != 1:
        raise KernelError(f"Constant: exactly one value attribute must be set, got {present or 'none'}")
    if value is not None:
        return np.asarray(value)
    if sparse_value is not None:
        raise UnsupportedOpError("Constant: sparse_value is not supported by the numpy engine")
    if value_float is not None or value_floats is not None:
        return np.asarray(value_float if value_float is not None else value_floats, dtype=np.float32)
    if value_int is not None or value_ints is not None:
        return np.asarray(value_int if value_int is not None else value_ints, dtype=np.int64)
    text = value_string if value_string is not None else value_strings
    if isinstance(text, str):
        result = np.empty((), dtype=object)
        result[()] = text
        return result
    return np.array(list(text), dtype=object)


@kernel("ConstantOfShape", since=9)
def ConstantOfShape(input, *, value=None):
    """A tensor of shape ``input`` filled with the one element of ``value`` (float32 0 by default)."""
    shape = int_list(input)
    if any(d < 0 for d in shape):
        raise KernelError(f"ConstantOfShape: dimensions must be non-negative, got {shape}")
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1:
        raise KernelError(f"ConstantOfShape: 'value' must hold one element, got {fill.size}")
    return np.full(shape, fill[0], dtype=fill.dtype)
