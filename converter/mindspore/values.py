"""Decode MINDIR attribute and tensor messages into Python values and numpy arrays.

Encodings (``mindir_exporter.cc``; reference §1.3-§1.5):

* scalar attributes carry their type in ``type`` (``BOOL``/``INT*`` in ``i``, ``FLOAT`` in ``f``,
  ``DOUBLE`` in ``d``, ``STRING`` in ``s``); items of a ``TUPLE``/``LIST`` are nested
  ``AttributeProto`` in ``values`` whose scalar sits in the repeated field (``ints``, ``floats``,
  ``strings``), which is how MindSpore 2.x writes them;
* a tensor constant is ``TENSOR`` (``t``) or ``TENSORS`` with one tensor holding data; a
  ``TENSORS`` item without data is a dtype; ``NONE`` is None; ``UMONAD``/``IOMONAD`` are the
  side-effect tokens that bookkeeping nodes pass around;
* tensor bytes are ``raw_data`` (C order, the host's byte order; ``ModelProto.little_endian``),
  the typed repeated fields, or ``external_data{location, offset, length}`` (see
  :mod:`converter.mindspore.external_data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converter.mindspore.errors import MindIRFormatError

# TensorProto.DataType -> numpy (little-endian); BFLOAT16 and QINT4X2 have no numpy type.
DATA_TYPES: dict[int, np.dtype] = {
    1: np.dtype("<f4"),
    2: np.dtype("u1"),
    3: np.dtype("i1"),
    4: np.dtype("<u2"),
    5: np.dtype("<i2"),
    6: np.dtype("<i4"),
    7: np.dtype("<i8"),
    9: np.dtype("?"),
    10: np.dtype("<f2"),
    11: np.dtype("<f8"),  # DOUBLE: what the exporter writes for float64
    12: np.dtype("<u4"),
    13: np.dtype("<u8"),
    17: np.dtype("<f8"),  # FLOAT64: accepted by the loader too
}
DATA_TYPE_NAMES = {8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 18: "QINT4X2"}

# MindSpore TypeId (``mindspore/core/ir/dtype/type_id.h``), the encoding of a dtype argument such
# as Cast's ``dst_type`` when attributes arrive as inputs.
TYPE_IDS: dict[int, np.dtype] = {
    30: np.dtype("?"),
    32: np.dtype("i1"),
    33: np.dtype("i2"),
    34: np.dtype("i4"),
    35: np.dtype("i8"),
    37: np.dtype("u1"),
    38: np.dtype("u2"),
    39: np.dtype("u4"),
    40: np.dtype("u8"),
    42: np.dtype("f2"),
    43: np.dtype("f4"),
    44: np.dtype("f8"),
}

# AttributeProto.AttributeType values used below
FLOAT, INT_TYPES, STRING, BOOL, DOUBLE = 1, (2, 3, 4, 5, 6, 7, 12, 13), 8, 9, 11
FLOAT16, BFLOAT16 = 10, 16
TENSOR, TENSORS, TUPLE, LIST, DICT, UMONAD, IOMONAD, NONE = 17, 19, 20, 21, 22, 23, 24, 25

MAX_ELEMENTS = 1 << 31  # a dims product above this is a damaged file, not a model


class Monad:
    """The side-effect token (U/IO monad) threaded through Load/UpdateState/Depend."""

    def __repr__(self) -> str:
        return "Monad"


MONAD = Monad()


@dataclass(frozen=True)
class DType:
    """A dtype given as a value (Cast's target type)."""

    dtype: np.dtype


def attribute_value(attr: Any, where: str, base_dir: Path | None = None) -> Any:
    """The Python value of an ``AttributeProto`` (tuples for TUPLE/LIST, arrays for tensors)."""
    kind = attr.type
    if kind in (TUPLE, LIST):
        items = tuple(attribute_value(item, where, base_dir) for item in attr.values)
        return items if kind == TUPLE else list(items)
    if kind == DICT:
        return {item.name: attribute_value(item, where, base_dir) for item in attr.values}
    if kind == TENSOR:
        return tensor_array(attr.t, where, base_dir)
    if kind == TENSORS:
        return _tensors_value(attr, where, base_dir)
    if kind == NONE:
        return None
    if kind in (UMONAD, IOMONAD):
        return MONAD
    if kind == STRING:
        raw = attr.strings[0] if attr.strings else attr.s
        return raw.decode("utf-8", errors="replace")
    if kind == BOOL:
        return bool(attr.ints[0] if attr.ints else attr.i)
    if kind in INT_TYPES:
        return int(attr.ints[0] if attr.ints else attr.i)
    if kind in (FLOAT, FLOAT16, BFLOAT16):
        return float(attr.floats[0] if attr.floats else attr.f)
    if kind == DOUBLE:
        return float(attr.doubles[0] if attr.doubles else attr.d)
    if kind == 0 and attr.HasField("s"):
        return attr.s.decode("utf-8", errors="replace")
    if kind == 0:  # untyped: graph flags written as bare names; an int if one is present
        return int(attr.i)
    raise MindIRFormatError(
        f"{where}: attribute {attr.name or '(tuple item)'!r} has type {kind}, which the MINDIR importer "
        "does not read; re-export without it or report the model"
    )


def _tensors_value(attr: Any, where: str, base_dir: Path | None) -> Any:
    tensors = list(attr.tensors)
    if len(tensors) == 1 and not _has_data(tensors[0]) and not tensors[0].dims:
        if tensors[0].data_type not in DATA_TYPES:
            raise MindIRFormatError(f"{where}: dtype value {tensors[0].data_type} is not supported")
        return DType(DATA_TYPES[tensors[0].data_type].newbyteorder("="))
    arrays = tuple(tensor_array(t, where, base_dir) for t in tensors)
    return arrays[0] if len(arrays) == 1 else arrays


def _has_data(proto: Any) -> bool:
    return bool(
        proto.raw_data
        or proto.HasField("external_data")
        or proto.float_data
        or proto.int32_data
        or proto.int64_data
        or proto.double_data
        or proto.uint64_data
    )


def numpy_dtype(data_type: int, where: str) -> np.dtype:
    if data_type not in DATA_TYPES:
        name = DATA_TYPE_NAMES.get(data_type, str(data_type))
        raise MindIRFormatError(
            f"{where}: tensor data type {name} is not supported (float, int, uint and bool types are)"
        )
    return DATA_TYPES[data_type]


def checked_dims(dims: Any, where: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise MindIRFormatError(f"{where}: a stored tensor has negative dims {list(shape)}; the file is damaged")
    if int(np.prod(shape, dtype=np.float64)) > MAX_ELEMENTS:
        raise MindIRFormatError(f"{where}: tensor dims {list(shape)} are implausibly large; the file is damaged")
    return shape


def tensor_array(proto: Any, where: str, base_dir: Path | None = None) -> np.ndarray:
    """The numpy array of a ``TensorProto`` holding data (inline, typed fields or external)."""
    name = proto.name or "(unnamed)"
    what = f"{where}: tensor {name!r}"
    dtype = numpy_dtype(proto.data_type, what)
    shape = checked_dims(proto.dims, what)
    count = int(np.prod(shape, dtype=np.int64))
    if proto.HasField("external_data"):
        from converter.mindspore.external_data import read_external

        raw = read_external(proto.external_data, base_dir, count * dtype.itemsize, what)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    if proto.raw_data or count == 0:
        raw = proto.raw_data
        if len(raw) != count * dtype.itemsize:
            raise MindIRFormatError(
                f"{what}: dims {list(shape)} ({dtype}) need {count * dtype.itemsize} bytes, raw_data has "
                f"{len(raw)}; the file is damaged or truncated"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    for field in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
        values = getattr(proto, field)
        if values:
            if len(values) != count:
                raise MindIRFormatError(f"{what}: {field} has {len(values)} values, dims {list(shape)} need {count}")
            return np.asarray(values).astype(dtype.newbyteorder("=")).reshape(shape)
    raise MindIRFormatError(f"{what}: holds no data (no raw_data, typed values or external_data)")
