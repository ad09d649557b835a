"""Element types of .lite tensors.

The numbering is ONNX's ``TensorProto.DataType`` (https://onnx.ai/onnx/api/mapping.html), so a
value converts between the two formats unchanged.

numpy has no bfloat16, float8 or 4/2-bit types. In memory such tensors are kept as their raw
storage: bfloat16 as ``uint16`` words, float8 as ``uint8`` bytes, and sub-byte types packed two
(4-bit) or four (2-bit) to a byte, low bits first, exactly as ONNX stores them. ``storage_dtype``
names that numpy type; ``unpack_subbyte`` and ``bfloat16_to_float32`` give the logical values.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class DataType(IntEnum):
    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26


# numpy type used to hold each element type in memory (see the module docstring).
_STORAGE: dict[DataType, np.dtype] = {
    DataType.FLOAT: np.dtype(np.float32),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT8: np.dtype(np.int8),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT64: np.dtype(np.int64),
    DataType.STRING: np.dtype(object),
    DataType.BOOL: np.dtype(np.bool_),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.DOUBLE: np.dtype(np.float64),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.COMPLEX64: np.dtype(np.complex64),
    DataType.COMPLEX128: np.dtype(np.complex128),
    DataType.BFLOAT16: np.dtype(np.uint16),
    DataType.FLOAT8E4M3FN: np.dtype(np.uint8),
    DataType.FLOAT8E4M3FNUZ: np.dtype(np.uint8),
    DataType.FLOAT8E5M2: np.dtype(np.uint8),
    DataType.FLOAT8E5M2FNUZ: np.dtype(np.uint8),
    DataType.UINT4: np.dtype(np.uint8),
    DataType.INT4: np.dtype(np.uint8),
    DataType.FLOAT4E2M1: np.dtype(np.uint8),
    DataType.FLOAT8E8M0: np.dtype(np.uint8),
    DataType.UINT2: np.dtype(np.uint8),
    DataType.INT2: np.dtype(np.uint8),
}

# Bits per element for the packed sub-byte types; every other fixed-size type uses itemsize * 8.
_SUBBYTE_BITS: dict[DataType, int] = {
    DataType.UINT4: 4,
    DataType.INT4: 4,
    DataType.FLOAT4E2M1: 4,
    DataType.UINT2: 2,
    DataType.INT2: 2,
}

# numpy dtypes that map back to a DataType unambiguously.
_FROM_NUMPY: dict[np.dtype, DataType] = {
    np.dtype(np.float32): DataType.FLOAT,
    np.dtype(np.uint8): DataType.UINT8,
    np.dtype(np.int8): DataType.INT8,
    np.dtype(np.uint16): DataType.UINT16,
    np.dtype(np.int16): DataType.INT16,
    np.dtype(np.int32): DataType.INT32,
    np.dtype(np.int64): DataType.INT64,
    np.dtype(object): DataType.STRING,
    np.dtype(np.bool_): DataType.BOOL,
    np.dtype(np.float16): DataType.FLOAT16,
    np.dtype(np.float64): DataType.DOUBLE,
    np.dtype(np.uint32): DataType.UINT32,
    np.dtype(np.uint64): DataType.UINT64,
    np.dtype(np.complex64): DataType.COMPLEX64,
    np.dtype(np.complex128): DataType.COMPLEX128,
}


def storage_dtype(dtype: DataType) -> np.dtype:
    """The numpy dtype that holds ``dtype`` in memory (raw words for types numpy lacks)."""
    try:
        return _STORAGE[DataType(dtype)]
    except (KeyError, ValueError) as err:
        raise ValueError(f"no storage type for element type {dtype!r}") from err


def from_numpy(dtype: np.dtype | type) -> DataType:
    """The DataType of a numpy dtype; strings (``str``/``bytes``/object) map to STRING."""
    dt = np.dtype(dtype)
    if dt.kind in ("U", "S"):
        return DataType.STRING
    try:
        return _FROM_NUMPY[dt]
    except KeyError as err:
        raise ValueError(f"numpy dtype {dt} has no .lite element type") from err


def element_bits(dtype: DataType) -> int:
    """Bits one element occupies in a buffer (0 for STRING, which has no fixed size)."""
    dtype = DataType(dtype)
    if dtype == DataType.STRING:
        return 0
    if dtype in _SUBBYTE_BITS:
        return _SUBBYTE_BITS[dtype]
    return storage_dtype(dtype).itemsize * 8


def byte_size(dtype: DataType, count: int) -> int:
    """Bytes needed to store ``count`` elements of ``dtype`` (sub-byte types rounded up)."""
    return (count * element_bits(dtype) + 7) // 8


def is_subbyte(dtype: DataType) -> bool:
    return DataType(dtype) in _SUBBYTE_BITS


def unpack_subbyte(packed: np.ndarray, dtype: DataType, shape: tuple[int, ...]) -> np.ndarray:
    """Logical values of a packed 4- or 2-bit tensor, as int8 (signed types) or uint8."""
    dtype = DataType(dtype)
    bits = _SUBBYTE_BITS[dtype]
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.asarray(packed, dtype=np.uint8).reshape(-1)
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    values = ((raw[:, None] >> shifts) & ((1 << bits) - 1)).reshape(-1)[:count]
    if dtype in (DataType.INT4, DataType.INT2):
        sign = 1 << (bits - 1)
        values = (values.astype(np.int16) ^ sign) - sign
        return values.astype(np.int8).reshape(shape)
    return values.astype(np.uint8).reshape(shape)


def pack_subbyte(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """Pack logical 4- or 2-bit values (any integer array) into bytes, low bits first."""
    bits = _SUBBYTE_BITS[DataType(dtype)]
    per_byte = 8 // bits
    flat = (np.asarray(values).reshape(-1).astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    padded = np.zeros(-(-flat.size // per_byte) * per_byte, dtype=np.uint8)
    padded[: flat.size] = flat
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    return np.bitwise_or.reduce(padded.reshape(-1, per_byte) << shifts, axis=1).astype(np.uint8)


def bfloat16_to_float32(words: np.ndarray) -> np.ndarray:
    """Widen bfloat16 words (uint16) to float32 exactly."""
    return (np.asarray(words, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 words (round half to even; NaN stays NaN)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    words = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    words[nan] = 0x7FC0
    return words


_SMALLEST_HALF = np.float16(2.0 ** -24)  # float16's smallest subnormal
_LARGEST_HALF = np.finfo(np.float16).max


def float32_to_float16_clamped(values: np.ndarray) -> np.ndarray:
    """``values`` in float16 for half-precision compute on a GPU, those float16 cannot hold
    clamped to the nearest it can instead of flushed: a nonzero value under the smallest
    subnormal (a decomposed LayerNorm's 1e-12 epsilon) keeps that subnormal with its sign, not 0
    (a zero variance plus a zero epsilon is a division by zero), and a finite value past 65504
    (an attention mask's -3.4e38) becomes ±65504, not an infinity (a fully masked row would give
    NaN), as ONNX Runtime's own float16 converter clamps constants. NaN and infinities stay."""
    with np.errstate(over="ignore"):
        half = values.astype(np.float16)
    flushed = (half == 0) & (values != 0)
    overflowed = np.isinf(half) & np.isfinite(values)
    if flushed.any() or overflowed.any():
        half[flushed] = np.copysign(_SMALLEST_HALF, values[flushed])
        half[overflowed] = np.copysign(_LARGEST_HALF, values[overflowed])
    return half
