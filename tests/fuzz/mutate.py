"""Seeded mutators: byte-level edits for any file, field-level edits for protobuf messages.

Every mutated input is a pure function of ``(seed, index)``: :func:`rng_for` seeds a
``random.Random`` from both, so a failure found in run 3 at index 81,234 is reproduced by asking
for that index again (``python -m tests.fuzz.run --format onnx --replay 81234``), with no corpus
files to carry around.

Byte-level edits are the classic AFL set (bit flips, "interesting" integers at 1/2/4/8-byte
widths, inserts, deletes, truncation, chunk copies, splicing with another seed, large protobuf
varints). Field-level edits walk a protobuf message and change one field at a time (sizes, dims,
type enums, strings, repeated lengths), which reaches the checks behind the wire-format parser:
a byte flip rarely produces a well-formed ONNX graph with a dimension of 2**62.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

INTERESTING_8 = (0, 1, 0x7F, 0x80, 0xFF)
INTERESTING_16 = (0, 1, 0x7FFF, 0x8000, 0xFFFF, 0x100, 0x1000)
INTERESTING_32 = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x10000, 0x40000000, 1 << 24)
INTERESTING_64 = (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 32, 1 << 40, 1 << 48)
# Values for integer fields: sizes and dims at the edges of every width, and negatives.
INTERESTING_INTS = (0, 1, 2, 3, -1, -2, 7, 64, 255, 256, 65535, 1 << 20, (1 << 31) - 1, -(1 << 31), 1 << 31,
                    (1 << 32) - 1, 1 << 40, (1 << 62), (1 << 63) - 1, -(1 << 63), (1 << 64) - 1)
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4e38, 1e300)
INTERESTING_TEXT = ("", "x", "../../etc/passwd", "a" * 300, "\u00e9\u4e2d", "0", "-1", "Conv", "Relu",
                    "MatMul", "Reshape", "If", "Loop", "Scan", "com.microsoft", "ai.onnx.ml", "Float32",
                    "Int64", "str", "BFloat16", "REF::missing", "\x00")


def rng_for(seed: int, index: int) -> random.Random:
    """The generator of input ``index`` of a run with ``seed``: independent of every other index."""
    return random.Random(f"lite-fuzz:{seed}:{index}")


# ----- bytes ------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _flip_bit(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    position = rng.randrange(len(data))
    data[position] ^= 1 << rng.randrange(8)


def _random_byte(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    data[rng.randrange(len(data))] = rng.randrange(256)


def _interesting_int(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    width, values = rng.choice(((1, INTERESTING_8), (2, INTERESTING_16), (4, INTERESTING_32), (8, INTERESTING_64)))
    if len(data) < width:
        return
    value = rng.choice(values + (len(data), len(data) + 1, len(data) - 1))
    value &= (1 << (8 * width)) - 1
    order = rng.choice("<>")
    position = rng.randrange(len(data) - width + 1)
    data[position : position + width] = struct.pack(order + {1: "B", 2: "H", 4: "I", 8: "Q"}[width], value)


def _add_small(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    position = rng.randrange(len(data))
    data[position] = (data[position] + rng.choice((-3, -2, -1, 1, 2, 3, 16, -16))) % 256


def _insert(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    position = rng.randrange(len(data) + 1)
    data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))


def _insert_varint(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    position = rng.randrange(len(data) + 1)
    data[position:position] = _varint(rng.choice(INTERESTING_INTS))


def _delete(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    start = rng.randrange(len(data))
    del data[start : start + rng.randint(1, max(1, min(64, len(data) // 4)))]


def _truncate(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    del data[rng.randrange(len(data)) :]


def _copy_chunk(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    size = rng.randint(1, max(1, min(128, len(data) // 2)))
    source = rng.randrange(max(1, len(data) - size))
    chunk = bytes(data[source : source + size])
    target = rng.randrange(len(data))
    if rng.random() < 0.5:
        data[target : target + size] = chunk
    else:
        data[target:target] = chunk


def _splice(data: bytearray, rng: random.Random, others: list[bytes]) -> None:
    other = rng.choice(others)
    if not other:
        return
    cut, other_cut = rng.randrange(len(data)), rng.randrange(len(other))
    data[cut:] = other[other_cut:]


_BYTE_EDITS: tuple[tuple[Callable, int], ...] = (
    (_flip_bit, 4), (_random_byte, 4), (_interesting_int, 6), (_add_small, 3), (_insert, 2),
    (_insert_varint, 2), (_delete, 2), (_truncate, 1), (_copy_chunk, 2), (_splice, 1),
)
_EDITS = [edit for edit, weight in _BYTE_EDITS for _ in range(weight)]


def mutate_bytes(data: bytes, rng: random.Random, others: list[bytes], max_edits: int = 8) -> bytes:
    """``data`` with 1..max_edits stacked byte-level edits (most inputs get one or two)."""
    buffer = bytearray(data)
    edits = min(max_edits, 1 + int(rng.expovariate(0.7)))
    for _ in range(edits):
        if not buffer:
            buffer.extend(rng.randbytes(rng.randint(0, 16)))
            continue
        rng.choice(_EDITS)(buffer, rng, others)
    return bytes(buffer)


# ----- protobuf messages ---------------------------------------------------------------------------

_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, (1 << 32) - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, (1 << 64) - 1),
}


def _is_repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _fields(message: Message) -> list[tuple[Message, FieldDescriptor]]:
    """Every set field of ``message`` and of the messages inside it (maps left out)."""
    found = []
    stack = [message]
    while stack:
        current = stack.pop()
        for field, value in current.ListFields():
            if _is_map(field):
                continue
            found.append((current, field))
            if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                stack.extend(value if _is_repeated(field) else [value])
    return found


def _scalar_value(field: FieldDescriptor, rng: random.Random, strings: list[str]):
    cpp = field.cpp_type
    if cpp in _INT_RANGES:
        low, high = _INT_RANGES[cpp]
        candidates = [v for v in INTERESTING_INTS if low <= v <= high]
        return rng.choice(candidates)
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return rng.choice(values + [max(values) + 1, -1])
    if cpp in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        return rng.choice(INTERESTING_FLOATS)
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return rng.random() < 0.5
    if field.type == FieldDescriptor.TYPE_BYTES:
        return rng.choice((b"", b"\x00", rng.randbytes(rng.randint(1, 33)), b"\xff" * 7))
    return rng.choice(strings + list(INTERESTING_TEXT))


def mutate_message(message: Message, rng: random.Random, edits: int = 1) -> None:
    """Apply ``edits`` field-level edits to ``message`` in place (see the module docstring)."""
    for _ in range(edits):
        fields = _fields(message)
        if not fields:
            return
        strings = [v for m, f in fields if f.cpp_type == FieldDescriptor.CPPTYPE_STRING
                   and f.type != FieldDescriptor.TYPE_BYTES and not _is_repeated(f) for v in [getattr(m, f.name)]]
        owner, field = rng.choice(fields)
        try:
            _edit_field(owner, field, rng, strings[:50])
        except (ValueError, TypeError):
            continue  # the value does not fit the field (closed enum, range): try another edit


def _edit_field(owner: Message, field: FieldDescriptor, rng: random.Random, strings: list[str]) -> None:
    is_message = field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE
    if _is_repeated(field):
        values = getattr(owner, field.name)
        action = rng.choice(("drop", "duplicate", "clear", "set", "append") if not is_message
                            else ("drop", "duplicate", "clear", "swap"))
        if action == "drop" and len(values):
            del values[rng.randrange(len(values))]
        elif action == "clear":
            owner.ClearField(field.name)
        elif action == "duplicate" and len(values):
            item = values[rng.randrange(len(values))]
            for _ in range(rng.choice((1, 1, 2, 100))):
                if is_message:
                    values.add().CopyFrom(item)
                else:
                    values.append(item)
        elif action == "swap" and len(values) > 1:
            i, j = rng.randrange(len(values)), rng.randrange(len(values))
            first, second = type(values[i])(), type(values[j])()
            first.CopyFrom(values[i])
            second.CopyFrom(values[j])
            values[i].CopyFrom(second)
            values[j].CopyFrom(first)
        elif action == "set" and len(values):
            values[rng.randrange(len(values))] = _scalar_value(field, rng, strings)
        elif action == "append":
            values.append(_scalar_value(field, rng, strings))
        return
    if is_message:
        owner.ClearField(field.name)
        return
    if rng.random() < 0.1:
        owner.ClearField(field.name)
    else:
        setattr(owner, field.name, _scalar_value(field, rng, strings))
