"""QuantizeLinear: y = saturate(round_half_even(x / y_scale) + y_zero_point).

https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html

Per tensor (opset 10), per axis (13), with ``saturate`` (19, float8 only), blocked with
``block_size`` and an explicit ``output_dtype`` (21), and ``precision`` for the division (23).
4- and 2-bit outputs are returned unpacked as int8/uint8 holding the logical values; their
range comes from ``output_dtype`` (an int8 zero point alone cannot say it is int4).
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._quant_common import broadcast_parameter, element_type_of, integer_range
from lite.ops.registry import kernel

_FLOAT_PRECISIONS = {1: np.float32, 10: np.float16, 11: np.float64}


def quantize(x, y_scale, y_zero_point, *, axis=1, block_size=0, output_dtype=0, precision=0):
    x = np.asarray(x)
    if output_dtype:
        element_type = int(output_dtype)
    elif y_zero_point is not None:
        element_type = element_type_of(y_zero_point)
    else:
        element_type = 2  # uint8, the spec's default
    low, high, dtype = integer_range("QuantizeLinear", element_type)
    if _per_tensor_float32(x, y_scale, y_zero_point, block_size, precision, high - low):
        return _quantize_per_tensor(x, y_scale, y_zero_point, low, high, dtype)
    scale = broadcast_parameter("QuantizeLinear", y_scale, x.shape, axis, block_size)
    # x / scale may overflow to ±inf for a tiny scale: saturation below clamps it to the integer
    # range, as the spec says, so the overflow is expected and not warned about.
    with np.errstate(over="ignore", divide="ignore"):
        if precision:
            if precision not in _FLOAT_PRECISIONS:
                raise UnsupportedOpError(f"QuantizeLinear: precision {precision} is not supported")
            kind = _FLOAT_PRECISIONS[precision]
            scaled = x.astype(kind) / scale.astype(kind)
        else:
            scaled = x / scale
    values = np.rint(scaled).astype(np.float64)
    if y_zero_point is not None:
        values = values + broadcast_parameter(
            "QuantizeLinear", y_zero_point, x.shape, axis, block_size
        ).astype(np.float64)
    return np.clip(values, low, high).astype(dtype)


def _per_tensor_float32(x, scale, zero_point, block_size, precision, span) -> bool:
    """float32 in, one scale and zero point, an integer range float32 holds exactly (8 and 16
    bits): the common case (every activation of a QDQ model), computed in place below."""
    return (x.dtype == np.float32 and not block_size and not precision and span < 1 << 24
            and np.size(scale) == 1 and np.asarray(scale).dtype == np.float32
            and (zero_point is None or np.size(zero_point) == 1))


def _quantize_per_tensor(x, scale, zero_point, low, high, dtype) -> np.ndarray:
    """The general path's arithmetic (the float32 quotient rounded half to even, the zero point
    added, saturated) in one float32 buffer: integers below 2**24 add exactly, and larger
    quotients saturate alike; a third of the general path's time on small tensors."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        values = np.divide(x, np.asarray(scale).reshape(()))
    np.rint(values, out=values)
    if zero_point is not None:
        values += np.float32(np.asarray(zero_point).reshape(()))
    np.maximum(values, np.float32(low), out=values)  # np.clip: twice the time on small tensors
    np.minimum(values, np.float32(high), out=values)
    return values.astype(dtype)


@kernel("QuantizeLinear", since=10)
def QuantizeLinear_10(x, y_scale, y_zero_point=None):
    return quantize(x, y_scale, y_zero_point)


@kernel("QuantizeLinear", since=13)
def QuantizeLinear_13(x, y_scale, y_zero_point=None, *, axis=1):
    return quantize(x, y_scale, y_zero_point, axis=axis)


@kernel("QuantizeLinear", since=19)
def QuantizeLinear_19(x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    # saturate only changes float8 outputs, which the numpy engine does not produce.
    return quantize(x, y_scale, y_zero_point, axis=axis)


@kernel("QuantizeLinear", since=21)
def QuantizeLinear_21(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, saturate=1):
    return quantize(x, y_scale, y_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)


@kernel("QuantizeLinear", since=23)
def QuantizeLinear(
    x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, precision=0, saturate=1
):
    return quantize(
        x,
        y_scale,
        y_zero_point,
        axis=axis,
        block_size=block_size,
        output_dtype=output_dtype,
        precision=precision,
    )
