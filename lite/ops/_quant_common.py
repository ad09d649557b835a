"""Integer helpers shared by the quantized kernels (ONNX QLinear*/Integer semantics).

Integer products are accumulated exactly: the operands are widened to float64, whose 53-bit
mantissa holds any int8/uint8 dot product a real model produces, so BLAS does the work and
the result converts back to int32 without rounding.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError

# Integer element types an ONNX quantized tensor may have, with their value ranges; the 4-bit
# types are ONNX's INT4 (22) and UINT4 (21), kept unpacked at kernel level as int8/uint8.
INTEGER_RANGES: dict[int, tuple[int, int, np.dtype]] = {
    2: (0, 255, np.dtype(np.uint8)),
    3: (-128, 127, np.dtype(np.int8)),
    4: (0, 65535, np.dtype(np.uint16)),
    5: (-32768, 32767, np.dtype(np.int16)),
    6: (-(2**31), 2**31 - 1, np.dtype(np.int32)),
    21: (0, 15, np.dtype(np.uint8)),
    22: (-8, 7, np.dtype(np.int8)),
    25: (0, 3, np.dtype(np.uint8)),
    26: (-2, 1, np.dtype(np.int8)),
}


def centered(values: np.ndarray, zero_point: np.ndarray | None, axis: int | None = None) -> np.ndarray:
    """``values - zero_point`` as float64 (exact); a 1-D zero point applies along ``axis``."""
    result = np.asarray(values).astype(np.float64)
    if zero_point is None:
        return result
    zero = np.asarray(zero_point).astype(np.float64)
    if zero.ndim == 1 and zero.size > 1 and axis is not None:
        shape = [1] * result.ndim
        shape[axis] = zero.size
        zero = zero.reshape(shape)
    return result - zero


def to_int32(accumulated: np.ndarray) -> np.ndarray:
    return np.rint(accumulated).astype(np.int32)


def requantize(
    accumulated: np.ndarray,
    multiplier: np.ndarray,
    zero_point: np.ndarray | None,
    dtype: np.dtype,
) -> np.ndarray:
    """saturate(round_half_even(accumulated * multiplier) + zero_point) as ``dtype``."""
    info = np.iinfo(dtype)
    scaled = np.asarray(accumulated, dtype=np.float64) * np.asarray(multiplier).astype(np.float64)
    if zero_point is not None:
        scaled = scaled + np.asarray(zero_point).astype(np.float64)
    return np.clip(np.rint(scaled), info.min, info.max).astype(dtype)


def integer_range(op: str, element_type: int) -> tuple[int, int, np.dtype]:
    try:
        return INTEGER_RANGES[int(element_type)]
    except KeyError as err:
        raise UnsupportedOpError(
            f"{op}: element type {element_type} is not supported by the numpy engine "
            "(supported: uint8, int8, uint16, int16, int32, uint4, int4, uint2, int2)"
        ) from err


def element_type_of(array: np.ndarray) -> int:
    """The ONNX element type of a plain integer array (4/2-bit types need an explicit type)."""
    for element_type, (_, _, dtype) in INTEGER_RANGES.items():
        if np.asarray(array).dtype == dtype:
            return element_type
    raise UnsupportedOpError(f"integer dtype {np.asarray(array).dtype} has no quantized element type")


def broadcast_parameter(
    op: str, parameter: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int
) -> np.ndarray:
    """A scale or zero point reshaped (and, when blocked, repeated) to broadcast against ``shape``.

    Scalars and 1-element tensors are per tensor; a 1-D tensor is per ``axis``; with
    ``block_size`` the parameter has the input's rank and ``ceil(shape[axis] / block_size)``
    entries along ``axis``.
    """
    parameter = np.asarray(parameter)
    axis = axis + len(shape) if axis < 0 else axis
    if block_size:
        if parameter.ndim != len(shape):
            raise UnsupportedOpError(
                f"{op}: blocked quantization needs a parameter of rank {len(shape)}, got shape {parameter.shape}"
            )
        return np.repeat(parameter, block_size, axis=axis).take(range(shape[axis]), axis=axis)
    if parameter.size == 1:
        return parameter.reshape(())
    if parameter.ndim != 1 or parameter.size != shape[axis]:
        raise UnsupportedOpError(
            f"{op}: a per-axis parameter must be 1-D with {shape[axis]} entries (axis {axis}), "
            f"got shape {parameter.shape}"
        )
    target = [1] * len(shape)
    target[axis] = parameter.size
    return parameter.reshape(target)
