"""The data section of a .lite file: the weights' bytes after the flatbuffer (``schema/model.fbs``).

The flatbuffer holds the structure and, for each buffer, an offset and a length into this
section; the section starts at the first multiple of :data:`ALIGNMENT` after the flatbuffer, and
each buffer starts on such a boundary too, so the reader (:mod:`lite.format.reader`) can view
the weights in place (a memory-mapped file, numpy arrays without a copy). The writer checks each
constant's bytes against its declared type and shape before they go here
(:func:`checked_data`), and may record their SHA-256 (:func:`weights_digest`), which the reader
compares on request. Both sides take the layout from this module alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import BinaryIO

import numpy as np

from lite.errors import ModelFormatError
from lite.format import ir
from lite.format.dtypes import DataType, byte_size, is_subbyte, storage_dtype

ALIGNMENT = 64


def align(value: int) -> int:
    """``value`` rounded up to a multiple of :data:`ALIGNMENT`."""
    return -(-value // ALIGNMENT) * ALIGNMENT


def weights_digest(chunks: Iterable) -> str:
    """SHA-256 (hex) of the buffers' bytes in order: the file's ``weights_sha256``, which
    ``load(..., check_weights=True)`` compares. The flatbuffer's structure is checked field by
    field on every load; weights, most of a file's bytes, have no structure to check."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(memoryview(chunk))
    return digest.hexdigest()


def write(handle: BinaryIO, header: bytes, payloads: list[tuple[int, np.ndarray]]) -> None:
    """The file: the flatbuffer ``header``, then each payload at its data offset, zero-padded."""
    handle.write(header)
    data_start = align(len(header))
    position = len(header)
    for offset, array in payloads:
        gap = data_start + offset - position
        handle.write(b"\0" * gap)
        view = memoryview(array.reshape(-1).view(np.uint8))
        handle.write(view)
        position = data_start + offset + view.nbytes
    # Pad the end too, so the data section is a whole number of alignment units.
    handle.write(b"\0" * (align(position) - position))


def checked_data(tensor: ir.Tensor, where: str) -> np.ndarray:
    """The constant's data, checked against its declared dtype and shape."""
    data = np.asarray(tensor.data)
    label = f"constant {tensor.name!r} in {where}"
    if tensor.shape is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in tensor.shape):
        raise ModelFormatError(f"cannot write {label}: a constant needs a fixed shape, got {tensor.shape}")
    count = int(np.prod(tensor.shape, dtype=np.int64))
    if tensor.dtype == DataType.STRING:
        if data.size != count:
            raise ModelFormatError(f"cannot write {label}: {data.size} strings for shape {tensor.shape}")
        return data
    expected = storage_dtype(tensor.dtype)
    if data.dtype != expected:
        raise ModelFormatError(
            f"cannot write {label}: data is {data.dtype}, element type {tensor.dtype.name} is stored as {expected}"
        )
    if is_subbyte(tensor.dtype):
        if data.nbytes != byte_size(tensor.dtype, count):
            raise ModelFormatError(
                f"cannot write {label}: {tensor.dtype.name} data for shape {tensor.shape} must be "
                f"{byte_size(tensor.dtype, count)} packed bytes, got {data.nbytes}"
            )
        return data.reshape(-1)
    if data.size != count:
        raise ModelFormatError(f"cannot write {label}: {data.size} elements for shape {tensor.shape}")
    return data
