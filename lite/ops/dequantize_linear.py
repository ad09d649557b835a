"""DequantizeLinear: y = (x - x_zero_point) * x_scale.

https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html

Per tensor (opset 10), per axis (13), blocked with ``block_size`` (21), explicit
``output_dtype`` (23). 4/2-bit inputs arrive unpacked as int8/uint8 logical values. The
output has the scale's type unless ``output_dtype`` names another.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._quant_common import broadcast_parameter
from lite.ops.registry import kernel

_FLOAT_OUTPUTS = {1: np.float32, 10: np.float16, 11: np.float64}


def dequantize(x, x_scale, x_zero_point, *, axis=1, block_size=0, output_dtype=0):
    x = np.asarray(x)
    if not block_size and not output_dtype and np.size(x_scale) == 1 and np.asarray(x_scale).dtype == np.float32:
        return _dequantize_per_tensor(x, x_scale, x_zero_point)
    values = x.astype(np.float32)
    if x_zero_point is not None:
        values = values - broadcast_parameter(
            "DequantizeLinear", x_zero_point, x.shape, axis, block_size
        ).astype(np.float32)
    y = values * broadcast_parameter("DequantizeLinear", x_scale, x.shape, axis, block_size)
    if output_dtype:
        if output_dtype not in _FLOAT_OUTPUTS:
            raise UnsupportedOpError(
                f"DequantizeLinear: output_dtype {output_dtype} is not supported (float, float16, double)"
            )
        return y.astype(_FLOAT_OUTPUTS[output_dtype])
    return y.astype(np.asarray(x_scale).dtype)


def _dequantize_per_tensor(x, scale, zero_point) -> np.ndarray:
    """One scale and zero point, float32 out: the general path's arithmetic in one buffer."""
    values = x.astype(np.float32)
    if zero_point is not None:
        values -= np.float32(np.asarray(zero_point).reshape(()))
    values *= np.float32(np.asarray(scale).reshape(()))
    return values


@kernel("DequantizeLinear", since=10)
def DequantizeLinear_10(x, x_scale, x_zero_point=None):
    return dequantize(x, x_scale, x_zero_point)


@kernel("DequantizeLinear", since=13)
def DequantizeLinear_13(x, x_scale, x_zero_point=None, *, axis=1):
    return dequantize(x, x_scale, x_zero_point, axis=axis)


@kernel("DequantizeLinear", since=21)
def DequantizeLinear_21(x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    return dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@kernel("DequantizeLinear", since=23)
def DequantizeLinear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    return dequantize(
        x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype
    )
