"""Merging queued requests into one batch: the rows copied into pooled (optionally pinned)
buffers, for :class:`serving.batching.DynamicBatcher`."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("serving.batching")

Tensors = dict[str, np.ndarray]
Allocate = Callable[[tuple[int, ...], np.dtype], np.ndarray]


@dataclass
class Merged:
    """A batch merged and ready to execute."""

    inputs: Tensors
    buffers: dict[str, np.ndarray] | None  # pooled buffers inside ``inputs``, to give back after
    rows: list[int]  # per request
    size: int  # rows after padding
    merge_ns: int


def merge(pieces: list[np.ndarray], rows: int, out: np.ndarray) -> np.ndarray:
    """The pieces stacked along the batch axis into ``out``; rows past them (padding) are copies
    of the last row: a valid input for any model, and without effect on the real rows' results.

    The bytes are copied through memoryviews, which hold the GIL for each copy: numpy releases it
    around every large copy, and taking it back while the event loop thread runs Python waits up
    to a switch interval (5 ms) each time. ``python bench/serving_merge.py`` (65 images of 300 KB
    into a batch of 128, dev): 3.7 ms alone either way; next to a busy Python thread 335 ms
    through numpy, 8.9 ms through memoryviews."""
    if out.dtype == object or not out.flags.c_contiguous:
        np.concatenate(pieces, out=out[:rows])
        if rows < len(out):
            out[rows:] = out[rows - 1]
        return out
    flat = memoryview(out.reshape(-1).view(np.uint8))
    offset = 0
    for piece in pieces:
        data = np.ascontiguousarray(piece, dtype=out.dtype).reshape(-1).view(np.uint8)
        flat[offset:offset + data.nbytes] = memoryview(data)
        offset += data.nbytes
    row = out[0].nbytes
    if row:
        last = flat[offset - row:offset]
        for start in range(offset, len(flat), row):
            flat[start:start + row] = last
    return out


class MergeBuffers:
    """Batch input buffers, reused: merging a batch writes into memory already mapped (a fresh
    40 MB array costs its page faults on every batch, and pinned memory is slow to allocate).
    A buffer holds at least the rows asked for; the batch goes into its leading rows (still one
    contiguous block). Shared by the threads that merge and execute (one takes, another gives
    back). A buffer that an output may share memory with (a model that returns its input) is
    not reused.

    Buffers are kept per input and row shape (the dimensions after the batch). An input whose
    other dimensions vary (``["N", "M"]``) would otherwise leave a buffer behind for every size
    a client ever sent, and a client choosing sizes would grow the server without bound; so each
    input keeps the buffers of its ``SHAPES_PER_INPUT`` most recently used row shapes."""

    SHAPES_PER_INPUT = 4

    def __init__(self, allocate: Allocate | None = None) -> None:
        self._allocate = allocate or np.empty
        # input -> (row shape, dtype) -> buffers, the most recently used shape last
        self._free: dict[str, OrderedDict[tuple, list[np.ndarray]]] = {}
        self._lock = threading.Lock()

    def get(self, sample: Tensors, rows: int) -> dict[str, np.ndarray]:
        """Per input of ``sample``, a buffer of at least ``rows`` rows."""
        buffers = {}
        for name, array in sample.items():
            with self._lock:
                free = self._free.get(name, {}).get((array.shape[1:], array.dtype.str), [])
                fits = next((i for i, buffer in enumerate(free) if len(buffer) >= rows), None)
                buffer = free.pop(fits) if fits is not None else None
                if buffer is None and free:
                    free.pop()  # too small for this batch: make way for the larger one
            if buffer is None:
                shape = (rows, *array.shape[1:])
                buffer = np.empty(shape, array.dtype) if array.dtype == object else self._allocate(shape, array.dtype)
            buffers[name] = buffer
        return buffers

    def release(self, buffers: dict[str, np.ndarray], outputs: Tensors) -> None:
        if any(np.may_share_memory(buffer, out) for buffer in buffers.values() for out in outputs.values()):
            return
        with self._lock:
            for name, buffer in buffers.items():
                if buffer.dtype == object:
                    continue
                shapes = self._free.setdefault(name, OrderedDict())
                key = (buffer.shape[1:], buffer.dtype.str)
                shapes.setdefault(key, []).append(buffer)
                shapes.move_to_end(key)
                while len(shapes) > self.SHAPES_PER_INPUT:
                    shapes.popitem(last=False)

    def held_bytes(self) -> int:
        """What the kept buffers take, for tests and diagnostics."""
        with self._lock:
            return sum(b.nbytes for shapes in self._free.values() for free in shapes.values() for b in free)


def pinned_allocator(name: str) -> Allocate:
    """Allocate merge buffers in pinned host memory, or, where that cannot be had (no PyTorch or
    CuPy with a CUDA driver), in ordinary memory, said once in the log."""
    import lite

    fallback = False

    def allocate(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nonlocal fallback
        if not fallback:
            try:
                return lite.pinned_empty(shape, dtype)
            except lite.LiteError as err:
                fallback = True
                log.warning("model %s: batches are merged in ordinary host memory: %s", name, err)
        return np.empty(shape, dtype)

    return allocate
