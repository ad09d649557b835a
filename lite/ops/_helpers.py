"""Small helpers shared by the numpy kernels: axis handling, integer inputs, legacy broadcasting.

They raise :class:`lite.errors.KernelError` with the op type in the message, so a kernel can call
them without wrapping.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.format.dtypes import DataType, storage_dtype
from lite.plan_cache import PlanCache


def _clip_ufunc():
    """numpy's ``clip`` ufunc: ``np.clip`` is a Python wrapper around it that costs a few µs a
    call, and ``np.maximum`` on float32 runs 2-3x slower than it on this kind of CPU (AVX2), so
    a small map's ReLU was mostly overhead. The ufunc lives in numpy's private umath module
    (``numpy._core`` from numpy 2, ``numpy.core`` before); ``np.clip`` where it cannot be found."""
    import importlib

    for name in ("numpy._core.umath", "numpy.core.umath"):
        try:
            found = getattr(importlib.import_module(name), "clip", None)
        except ImportError:
            continue
        if isinstance(found, np.ufunc):
            return found
    return np.clip


clip = _clip_ufunc()
"""``clip(x, low, high, out=None)``: ``minimum(maximum(x, low), high)`` elementwise, NaN kept."""


def _c_einsum():
    """numpy's C einsum without ``np.einsum``'s Python layer (1.2 µs a call, a tenth of a small
    map's depthwise convolution); private like the clip ufunc, ``np.einsum`` where not found."""
    import importlib

    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            found = getattr(importlib.import_module(name), "c_einsum", None)
        except ImportError:
            continue
        if callable(found):
            return found
    return np.einsum


einsum = _c_einsum()
"""``einsum(subscripts, *operands, out=None)``: numpy's einsum (no ``optimize``)."""


# Operands up to this size are worth materializing at their full shape (see full_operand).
FULL_OPERAND_BYTES = 64 * 1024


def full_operand(operand: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``operand`` broadcast to ``shape`` and copied out, read-only, when that is at most
    ``FULL_OPERAND_BYTES`` (else ``operand`` itself). For a constant added on every call (a
    bias): a ufunc over operands of one shape takes numpy's fast path, half the time of one
    that broadcasts a row or column (1.5 against 0.7 µs for a 16x64 bias add, 31 against 16 µs
    for 196x768)."""
    if math.prod(shape) * operand.itemsize > FULL_OPERAND_BYTES:
        return operand
    # C order: numpy's default keeps the broadcast's stride order, whose zero strides put the
    # repeated axis innermost, and the add then strides through both operands (3x slower).
    full = np.array(np.broadcast_to(operand, shape), order="C")
    full.flags.writeable = False
    return full


def full_operand_within(operand: np.ndarray, shape: tuple[int, ...], cache: PlanCache,
                        pending: int = 0) -> tuple[np.ndarray, int]:
    """:func:`full_operand` for an entry of ``cache``, and the bytes it made: ``operand`` itself
    (0 bytes) where the cache's byte budget has no room for the copy beside ``pending`` bytes of
    the same entry. The entry is kept either way (a broadcast is slower, not wrong)."""
    if not cache.affords(pending + math.prod(shape) * operand.itemsize):
        return operand, 0
    full = full_operand(operand, shape)
    return full, 0 if full is operand else full.nbytes


class ReadOnlyInputs:
    """What a kernel derives from small read-only inputs (constants, values the engine remembers
    from shapes: both never change) and a data shape, kept by the inputs' identities: Slice's
    windows from its starts, ends, axes and steps cost more to work out than to apply. An entry
    holds weak references to its inputs: they tell a reused id from the same array, and keep no
    input alive, for a model's constants are views of its memory-mapped file, which would stay
    mapped (a file descriptor, and a replaced file's disk space) after the model is deleted.
    Writeable inputs are never kept (``key`` is None for them)."""

    def __init__(self, size: int = 256) -> None:
        self.entries: PlanCache[tuple[tuple, Any]] = PlanCache(entries=size)

    @staticmethod
    def key(shape: tuple[int, ...], inputs: tuple) -> tuple | None:
        for value in inputs:
            if value is not None and (type(value) is not np.ndarray or value.flags.writeable):
                return None
        return (shape, *map(id, inputs))

    def get(self, key: tuple, inputs: tuple) -> Any:
        entry = self.entries.get(key)
        if entry is None:
            return None
        for kept, value in zip(entry[0], inputs):
            if kept() is not value:
                return None
        return entry[1]

    def put(self, key: tuple, inputs: tuple, result: Any) -> None:
        """Keep ``result``, which must hold no view of ``inputs`` (it would keep them alive)."""
        self.entries.put(key, (tuple(_absent if value is None else weakref.ref(value) for value in inputs), result))


def _absent() -> None:
    """The weak reference kept for an input that is not given (None): it always reads None."""
    return None


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """``np.broadcast_shapes(a, b)`` without its cost (3-4 µs, more than a small elementwise
    kernel: a 64x64 model's per-channel Mul or a small Expand); ValueError where they do not
    broadcast."""
    if a == b:
        return a
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    elif len(b) < len(a):
        b = (1,) * (len(a) - len(b)) + b
    result = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} do not broadcast: {x} against {y}")
        result.append(y if x == 1 else x)
    return tuple(result)


def normalize_axis(op_type: str, axis: int, rank: int) -> int:
    """``axis`` in ``[-rank, rank)`` mapped to ``[0, rank)``."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise KernelError(f"{op_type}: axis {axis} is out of range for a tensor of rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(op_type: str, axes: Iterable[int], rank: int) -> tuple[int, ...]:
    """Each axis normalized; repeated axes are an error."""
    normalized = tuple(normalize_axis(op_type, axis, rank) for axis in axes)
    if len(set(normalized)) != len(normalized):
        raise KernelError(f"{op_type}: axes {list(axes)} name the same axis twice")
    return normalized


def int_list(values: np.ndarray | Iterable[int] | None) -> list[int] | None:
    """A 1-D integer tensor (or list) as Python ints; ``None`` stays ``None``."""
    if values is None:
        return None
    return [int(v) for v in np.asarray(values).reshape(-1)]


def scalar_int(op_type: str, name: str, value: np.ndarray) -> int:
    """The single integer held by a 0-d or 1-element input."""
    array = np.asarray(value)
    if array.size != 1:
        raise KernelError(f"{op_type}: input '{name}' must hold one value, got shape {array.shape}")
    return int(array.reshape(()))


def legacy_broadcast(
    op_type: str, A: np.ndarray, B: np.ndarray, broadcast: int, axis: int | None
) -> np.ndarray:
    """``B`` reshaped so numpy broadcasting reproduces the opset < 7 ``broadcast``/``axis`` rule.

    Before opset 7 a binary op required equal shapes unless ``broadcast=1``; then B's shape had
    to match a contiguous run of A's dimensions starting at ``axis`` (the trailing ones when
    ``axis`` is absent). https://github.com/onnx/onnx/blob/main/docs/Changelog.md#Add-6
    """
    if not broadcast:
        if A.shape != B.shape:
            raise KernelError(
                f"{op_type}: without broadcast=1 the shapes must be equal, got {A.shape} and {B.shape}"
            )
        return B
    if B.ndim == 0 or axis is None:
        return B
    start = normalize_axis(op_type, axis, A.ndim)
    trailing = A.ndim - start - B.ndim
    matched = A.shape[start : start + B.ndim]
    # A dimension of size 1 in B stretches over A's (exporters of that era relied on it).
    if trailing < 0 or any(b not in (a, 1) for a, b in zip(matched, B.shape)):
        raise KernelError(
            f"{op_type}: B of shape {B.shape} does not match A's dimensions {A.shape} from axis {axis}"
        )
    return B.reshape(B.shape + (1,) * trailing)


# Element types a kernel can produce as plain numpy arrays (no raw-word storage types).
_NUMPY_NATIVE = {
    DataType.FLOAT,
    DataType.UINT8,
    DataType.INT8,
    DataType.UINT16,
    DataType.INT16,
    DataType.INT32,
    DataType.INT64,
    DataType.STRING,
    DataType.BOOL,
    DataType.FLOAT16,
    DataType.DOUBLE,
    DataType.UINT32,
    DataType.UINT64,
    DataType.COMPLEX64,
    DataType.COMPLEX128,
}


def numpy_dtype(op_type: str, element_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type that numpy represents natively."""
    try:
        data_type = DataType(int(element_type))
    except ValueError as err:
        raise KernelError(f"{op_type}: unknown element type {element_type}") from err
    if data_type not in _NUMPY_NATIVE:
        raise UnsupportedOpError(
            f"{op_type}: element type {data_type.name} has no native numpy type; "
            "the numpy engine cannot produce it"
        )
    return storage_dtype(data_type)


def lowest(dtype: np.dtype) -> np.generic:
    """The smallest value of ``dtype`` (-inf for floats, False for bool)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.type(-np.inf)
    if dtype.kind == "b":
        return np.False_
    return dtype.type(np.iinfo(dtype).min)


def highest(dtype: np.dtype) -> np.generic:
    """The largest value of ``dtype`` (inf for floats, True for bool)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.type(np.inf)
    if dtype.kind == "b":
        return np.True_
    return dtype.type(np.iinfo(dtype).max)
