"""The values a .lite model stores: constants and node attributes as the kernels take them.

Shared by every engine and lowering (numpy, ONNX Runtime, PyTorch), which all read a constant's
logical value and an attribute's Python value the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lite.format import ir
from lite.format.dtypes import DataType, bfloat16_to_float32, is_subbyte, unpack_subbyte


def tensor_value(tensor: ir.Tensor) -> np.ndarray:
    """The logical value of a constant: sub-byte types unpacked, bfloat16 widened to float32."""
    data = tensor.data
    if is_subbyte(tensor.dtype):
        return unpack_subbyte(data, tensor.dtype, tuple(tensor.shape))
    if tensor.dtype == DataType.BFLOAT16:
        return bfloat16_to_float32(data)
    return data


def attribute_value(attribute: ir.Attribute) -> Any:
    """An attribute's value as kernels take it: text as str, tensors as arrays, lists as lists."""
    kind, value = attribute.type, attribute.value
    if kind == ir.AttributeType.STRING:
        return value.decode("utf-8", errors="surrogateescape")
    if kind == ir.AttributeType.STRINGS:
        return [v.decode("utf-8", errors="surrogateescape") for v in value]
    if kind == ir.AttributeType.TENSOR:
        return tensor_value(value)
    if kind == ir.AttributeType.TENSORS:
        return [tensor_value(t) for t in value]
    if kind in (ir.AttributeType.INTS, ir.AttributeType.FLOATS):
        return list(value)
    return value
