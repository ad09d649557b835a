"""KServe v2 tensor datatypes and their binary ("raw") form.

Datatypes: https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/
(section "Tensor Data Types"); BF16 is Triton's addition. Raw data is little-endian, row-major
and unpadded; BOOL is one byte; a BYTES tensor is, per element, a 4-byte little-endian length
followed by that many bytes (Triton ``extension_binary_data.md``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from .errors import InvalidRequestError

try:  # bfloat16 has no numpy type; ml_dtypes provides one when installed
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - depends on the environment
    _bfloat16 = None

_BY_NAME: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
if _bfloat16 is not None:
    _BY_NAME["BF16"] = np.dtype(_bfloat16)

_BY_DTYPE: dict[np.dtype, str] = {dtype.newbyteorder("="): name for name, dtype in _BY_NAME.items()}
_BY_DTYPE[np.dtype(np.str_)] = "BYTES"
_BY_DTYPE[np.dtype(np.bytes_)] = "BYTES"

DATATYPES: tuple[str, ...] = tuple(_BY_NAME)
MAX_DIMENSION = 2**31 - 1  # of a request's tensor (serving.limits says why)
MAX_RANK = 32  # numpy's arrays stop at 64 dimensions; no model input has more than a handful
_MAX_SPAN = 2**62  # numpy refuses shapes whose non-zero dimensions multiply past its index type

# Triton model_config.proto DataType enum values, for ModelConfig answers.
CONFIG_TYPE: dict[str, int] = {
    "BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7,
    "INT32": 8, "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13, "BF16": 14,
}


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of a KServe datatype name; InvalidRequestError for an unknown name."""
    try:
        return _BY_NAME[datatype]
    except KeyError:
        known = ", ".join(DATATYPES)
        raise InvalidRequestError(f"unknown datatype {datatype!r}; expected one of {known}") from None


def datatype_of(dtype: np.dtype) -> str:
    """The KServe datatype name of a numpy dtype (str/bytes/object arrays are BYTES)."""
    known = _BY_DTYPE.get(dtype)  # the common case, once per tensor of every request
    if known is not None:
        return known
    dtype = np.dtype(dtype)
    if dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _BY_DTYPE[dtype.newbyteorder("=")]
    except KeyError:
        raise InvalidRequestError(f"numpy dtype {dtype} has no KServe datatype") from None


def element_count(shape: Sequence[int], what: str) -> int:
    """Product of a request shape, rejecting what numpy cannot make an array of: more than
    MAX_RANK dimensions, negative ones, ones above MAX_DIMENSION, or non-zero dimensions whose
    product passes 2**62 (a zero elsewhere makes the count 0, but numpy still refuses the shape)."""
    if len(shape) > MAX_RANK:
        raise InvalidRequestError(f"{what}: shape of rank {len(shape)}; a tensor has at most {MAX_RANK} dimensions")
    count, nonzero = 1, 1
    for dim in shape:
        if dim < 0:
            raise InvalidRequestError(f"{what}: shape {list(shape)} has a negative dimension")
        if dim > MAX_DIMENSION:
            raise dimension_too_large(shape, dim, what)
        count *= dim
        nonzero *= dim or 1
    if nonzero > _MAX_SPAN:
        raise InvalidRequestError(
            f"{what}: shape {list(shape)}: its non-zero dimensions multiply past 2**62, more than any array can span"
        )
    return count


def dimension_too_large(shape: Sequence[int], dim: int, what: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{what} has shape {list(shape)}: dimension {dim} is larger than {MAX_DIMENSION} (2**31 - 1), the most "
        "any dimension may be"
    )


def decode_raw(raw: bytes, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """A read-only array viewing ``raw`` (input ``name``); the byte count must match shape × element size."""
    if datatype == "BYTES":
        what = f"input {name!r}"
        return deserialize_bytes(raw, element_count(shape, what), what).reshape(shape)
    dtype = _BY_NAME.get(datatype)
    if dtype is None:
        dtype = numpy_dtype(datatype)  # raises, naming the known datatypes
    try:
        array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    except ValueError:  # a byte count that is no whole number of elements, or does not fit the shape
        array = None
    if array is None or array.shape != shape:  # (a -1 in the shape was inferred by reshape)
        what = f"input {name!r}"
        count = element_count(shape, what)  # raises for a negative dimension
        if count * dtype.itemsize == len(raw):  # the bytes fit, numpy cannot make the shape: [2**63 - 1, 0]
            raise dimension_too_large(shape, max(shape), what)
        raise InvalidRequestError(
            f"{what}: {len(raw)} bytes of raw data, but shape {list(shape)} of {datatype} "
            f"needs {count * dtype.itemsize} ({count} elements × {dtype.itemsize} bytes)"
        )
    if datatype == "BOOL" and array.size and array.view(np.uint8).max() > 1:
        raise InvalidRequestError(f"input {name!r}: BOOL bytes must be 0 or 1")
    return array


def encode_raw(array: np.ndarray) -> bytes:
    """The raw form of an array (BYTES arrays length-prefixed)."""
    if array.dtype.kind in ("O", "U", "S"):
        return serialize_bytes(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array).tobytes()


def serialize_bytes(array: np.ndarray) -> bytes:
    """Row-major elements, each a little-endian uint32 length and the bytes (str as UTF-8)."""
    parts = []
    for item in np.asarray(array, dtype=object).reshape(-1):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(raw: bytes, count: int, what: str) -> np.ndarray:
    """Split length-prefixed BYTES data into an object array of ``count`` bytes objects."""
    items = []
    offset = 0
    view = memoryview(raw)
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise InvalidRequestError(f"{what}: BYTES data ends inside a length prefix at byte {offset}")
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise InvalidRequestError(
                f"{what}: BYTES element {len(items)} claims {length} bytes but only "
                f"{len(raw) - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
        if len(items) > count:
            break
    if len(items) != count:
        raise InvalidRequestError(f"{what}: BYTES data holds {len(items)} elements, the shape needs {count}")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array
