"""Structural verification of the flatbuffer part of a .lite file.

The flatbuffers Python runtime reads whatever offsets a buffer holds, so a damaged file can make
it raise ``IndexError``/``struct.error``, read garbage or loop for a very long time. This module
walks the buffer once, driven by the field layout generated from ``schema/model.fbs``
(``_generated/model_layout.py``), and returns plain Python values. Every offset and length is
checked against the buffer before it is read, enums are checked against their declared values,
and the total work is bounded by the buffer size (a hostile file may point many offsets at the
same table; without a budget that alone multiplies the work). Writers of format 2.0 share
identical items (strings, dimensions, shapes, attributes, quantization parameters), so a valid
file may reach an item more than once; they share only items that cost at most
:data:`SHARED_WALK_COST` steps to walk, which bounds the steps of a valid file (see ``_Walker``).

Semantic checks (indices, sizes, acyclicity) happen in :mod:`lite.format.reader`, on the values
returned here.

Flatbuffers wire format (https://flatbuffers.dev/internals/): a table starts with an int32
``soffset``; the vtable sits at ``table - soffset`` and holds uint16 ``vtable_size``,
``object_size`` and one uint16 field offset per slot (0 = absent). Offsets to strings, vectors
and sub-tables are uint32, relative to where they are stored. A vector is a uint32 count then
its elements; a string is a uint32 length, the bytes and a NUL.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from lite.errors import ModelFormatError
from lite.format._generated.model_layout import ENUMS, FILE_IDENTIFIER, ROOT, TABLES

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_SCALAR_FORMATS = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}
_SIGNED_FORMATS = {1: "<b", 2: "<h", 4: "<i", 8: "<q"}
_FLOAT_FIELDS = {("Attribute", "f")}
_SIGNED_FIELDS = {
    ("Dim", "value"), ("QuantParams", "axis"), ("QuantParams", "block_size"), ("Attribute", "i"),
    ("Attribute", "g"), ("OperatorSetId", "version"),
}
_BOOL_FIELDS = {("Tensor", "has_shape"), ("Tensor", "is_string_constant"), ("QuantParams", "signed"),
                ("QuantParams", "symmetric")}
# numpy element types of scalar vectors, by (table, field).
_VECTOR_DTYPES = {
    ("QuantParams", "scale"): np.dtype("<f4"),
    ("QuantParams", "zero_point"): np.dtype("<i8"),
    ("Attribute", "floats"): np.dtype("<f4"),
    ("Attribute", "ints"): np.dtype("<i8"),
    ("Attribute", "graphs"): np.dtype("<i4"),
    ("Node", "inputs"): np.dtype("<i4"),
    ("Node", "outputs"): np.dtype("<i4"),
    ("Graph", "inputs"): np.dtype("<i4"),
    ("Graph", "outputs"): np.dtype("<i4"),
    ("Graph", "captures"): np.dtype("<i4"),
}
# The most steps a writer may let one reference to a shared item cost (lite.format.writer).
SHARED_WALK_COST = 16
# Schema defaults of the fields whose default is not zero.
_DEFAULTS = {
    ("Dim", "value"): -1, ("QuantParams", "bits"): 8, ("QuantParams", "signed"): True,
    ("Tensor", "dtype"): 1, ("Attribute", "g"): -1,
}


def verify_flatbuffer(buf: memoryview) -> dict[str, Any]:
    """Check the size-prefixed flatbuffer at the start of ``buf`` and decode its root table.

    Returns the root table as a dict of field values: sub-tables as dicts, vectors of tables as
    lists of dicts, strings as bytes, scalar vectors as numpy arrays, absent fields as their
    schema default (None for non-scalars). Raises :class:`ModelFormatError` naming the table and
    field at fault.
    """
    total = len(buf)
    if total < 12:
        raise ModelFormatError(f"file is {total} bytes long, too short for a .lite model (at least 12)")
    if bytes(buf[8:12]) != FILE_IDENTIFIER:
        # An ONNX ModelProto starts with field 1 (ir_version) as a varint: tag byte 0x08.
        hint = "; an ONNX model? convert it first: lite convert MODEL.onnx -o MODEL.lite" if buf[0] == 0x08 else ""
        raise ModelFormatError(
            f"not a .lite file: expected identifier {FILE_IDENTIFIER!r} at bytes 8..12, "
            f"found {bytes(buf[8:12])!r}{hint}"
        )
    size = _U32.unpack_from(buf, 0)[0]
    if size < 8 or 4 + size > total:
        raise ModelFormatError(
            f"flatbuffer size prefix {size} does not fit the {total}-byte file (truncated file?)"
        )
    walker = _Walker(buf[4 : 4 + size])
    root_pos = walker.offset_target(0, "root")
    return walker.table(root_pos, ROOT, "Model")


class _Walker:
    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.size = len(buf)
        # The first walk of an item (table, string, vector element) costs at most one step per
        # byte it occupies; every further reference to a shared item is a 4-byte offset whose
        # walk costs at most SHARED_WALK_COST steps. So a valid buffer never needs more than
        # (1 + SHARED_WALK_COST / 4) steps per byte.
        self.budget = (1 + SHARED_WALK_COST // 4) * self.size + 64

    def spend(self, amount: int, where: str) -> None:
        self.budget -= amount
        if self.budget < 0:
            raise ModelFormatError(f"{where}: the file refers to the same data too many times (hostile or damaged file)")

    def u32(self, pos: int, where: str) -> int:
        if pos < 0 or pos + 4 > self.size:
            raise ModelFormatError(f"{where}: offset {pos} lies outside the {self.size}-byte flatbuffer")
        return _U32.unpack_from(self.buf, pos)[0]

    def offset_target(self, pos: int, where: str) -> int:
        target = pos + self.u32(pos, where)
        if target + 4 > self.size:
            raise ModelFormatError(f"{where}: points to {target}, outside the {self.size}-byte flatbuffer")
        return target

    def table(self, pos: int, name: str, where: str) -> dict[str, Any]:
        self.spend(1, where)
        if pos < 0 or pos + 4 > self.size:
            raise ModelFormatError(f"{where}: table {name} at {pos} lies outside the flatbuffer")
        vtable = pos - _I32.unpack_from(self.buf, pos)[0]
        if vtable < 0 or vtable + 4 > self.size:
            raise ModelFormatError(f"{where}: vtable of {name} at {vtable} lies outside the flatbuffer")
        vtable_size = _U16.unpack_from(self.buf, vtable)[0]
        object_size = _U16.unpack_from(self.buf, vtable + 2)[0]
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > self.size:
            raise ModelFormatError(f"{where}: vtable of {name} has invalid size {vtable_size}")
        if object_size < 4 or pos + object_size > self.size:
            raise ModelFormatError(f"{where}: table {name} of size {object_size} overruns the flatbuffer")
        values: dict[str, Any] = {}
        for slot, (field, kind) in enumerate(TABLES[name]):
            entry = 4 + 2 * slot
            field_offset = _U16.unpack_from(self.buf, vtable + entry)[0] if entry < vtable_size else 0
            here = f"{where}.{field}"
            if field_offset == 0:
                values[field] = self.default(name, field, kind)
                continue
            width = kind[1] if kind[0] == "scalar" else 4
            # Within the buffer, as flatbuffers' own verifier checks; not within the object size
            # the vtable records: flatbuffers' Python builder before 25 recorded 8 bytes for a
            # table whose 8-byte field sits at offset 4, and flatc reads such files.
            if field_offset < 4 or pos + field_offset + width > self.size:
                raise ModelFormatError(f"{here}: field offset {field_offset} lies outside the flatbuffer")
            values[field] = self.field(pos + field_offset, name, field, kind, here)
        return values

    @staticmethod
    def default(table: str, field: str, kind: tuple) -> Any:
        if kind[0] != "scalar":
            return None
        value = _DEFAULTS.get((table, field), 0)
        if (table, field) in _BOOL_FIELDS:
            return bool(value)
        if (table, field) in _FLOAT_FIELDS:
            return float(value)
        return value

    def field(self, pos: int, table: str, field: str, kind: tuple, where: str) -> Any:
        category = kind[0]
        if category == "scalar":
            return self.scalar(pos, table, field, kind, where)
        target = self.offset_target(pos, where)
        if category == "string":
            return self.string(target, where)
        if category == "table":
            return self.table(target, kind[1], where)
        count = self.u32(target, where)
        first = target + 4
        if category == "vector_scalar":
            nbytes = count * kind[1]
            if first + nbytes > self.size:
                raise ModelFormatError(f"{where}: vector of {count} elements overruns the flatbuffer")
            self.spend(1 + count // 8, where)
            dtype = _VECTOR_DTYPES[(table, field)]
            return np.frombuffer(self.buf, dtype=dtype, count=count, offset=first).copy()
        if first + 4 * count > self.size:
            raise ModelFormatError(f"{where}: vector of {count} offsets overruns the flatbuffer")
        items = []
        for index in range(count):
            element = first + 4 * index
            target = self.offset_target(element, f"{where}[{index}]")
            if category == "vector_string":
                items.append(self.string(target, f"{where}[{index}]"))
            else:
                items.append(self.table(target, kind[1], f"{where}[{index}]"))
        return items

    def scalar(self, pos: int, table: str, field: str, kind: tuple, where: str) -> Any:
        size, enum = kind[1], kind[2]
        if (table, field) in _FLOAT_FIELDS:
            return struct.unpack_from("<f", self.buf, pos)[0]
        if (table, field) in _BOOL_FIELDS:
            return self.buf[pos] != 0
        signed = (table, field) in _SIGNED_FIELDS or (enum is not None)
        fmt = _SIGNED_FORMATS[size] if signed else _SCALAR_FORMATS[size]
        value = struct.unpack_from(fmt, self.buf, pos)[0]
        if enum is not None and value not in ENUMS[enum][1]:
            raise ModelFormatError(f"{where}: {value} is not a valid {enum}")
        return value

    def string(self, pos: int, where: str) -> bytes:
        length = self.u32(pos, where)
        end = pos + 4 + length
        if end >= self.size:
            raise ModelFormatError(f"{where}: string of {length} bytes overruns the flatbuffer")
        self.spend(1 + length // 8, where)
        return bytes(self.buf[pos + 4 : end])
