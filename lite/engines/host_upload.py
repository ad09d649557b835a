"""Large numpy inputs to the GPU through a reusable pinned buffer, in overlapping chunks.

An ordinary (pageable) numpy array reaches the GPU at about 17 GB/s: the driver stages it through
a bounce buffer of its own, one chunk at a time, on one CPU thread; from page-locked memory the
copy engine moves about 55 GB/s (H200, ``bench/gpu_host_copies.py``). Copying into a pinned buffer
first with ``np.copyto`` gained nothing, because that copy alone runs on one thread at the same
17 GB/s. :class:`HostUploader` instead copies into its pinned buffer with PyTorch's CPU copy, which
splits a large copy over the intra-op threads, chunk by chunk, and queues each chunk's
host-to-device copy on a side stream as soon as the chunk is staged, so the host copy of chunk k+1
overlaps the DMA of chunk k; the caller's stream waits for the last chunk through an event, not
the host. The chunks take turns in a small ring of pinned buffers (:data:`RING_SLOTS`), kept and
grown, never allocated per call (pinning memory is slow).

Used by the torch engine and the ONNX Runtime engine's CUDA path, both only when PyTorch is
loaded; the module itself imports nothing beyond numpy (the engines hand it ``torch``).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

# Arrays below this size go the ordinary way: one pageable copy costs less than the staging's calls.
STAGED_MIN_BYTES = 4 << 20
# Chunks of this size keep the copy engine busy while the next chunk is staged; a 77 MB batch of
# 256 images makes 10 of them.
CHUNK_BYTES = 8 << 20
# Pinned chunk buffers used in turn (0: one pinned buffer as large as the array). A ring of a few
# chunks reuses memory the caches still hold, where a buffer of the array's size writes, and the
# copy engine reads, every byte from DRAM.
RING_SLOTS = 3


class HostUploader:
    """Copies numpy arrays to one CUDA device through a pinned staging buffer (see the module doc).

    Thread-safe: one upload at a time uses the buffer.
    """

    def __init__(self, torch: Any, device: Any, chunk_bytes: int = CHUNK_BYTES, ring_slots: int = RING_SLOTS) -> None:
        self.torch = torch
        self.device = torch.device(device)
        self.chunk_bytes = int(chunk_bytes)
        self.stream = torch.cuda.Stream(device=self.device)
        self._done = torch.cuda.Event()
        self._staging = None  # a pinned uint8 tensor, grown to the largest array seen (ring_slots 0)
        self._ring = [(None, torch.cuda.Event()) for _ in range(max(0, int(ring_slots)))]  # (buffer, its DMA read)
        self._lock = threading.Lock()

    def upload(self, array: np.ndarray) -> Any:
        """A new device tensor holding ``array``, ready for work queued on the current stream."""
        torch = self.torch
        target = torch.empty(array.shape, dtype=_torch_dtype(torch, array.dtype), device=self.device)
        self.upload_into(array, target)
        return target

    def upload_into(self, array: np.ndarray, target: Any) -> None:
        """Copy ``array`` into the contiguous device tensor ``target`` (same size and dtype); work
        queued on the current stream afterwards sees the values, and ``wait`` waits on the host."""
        torch = self.torch
        source = torch.from_numpy(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        destination = target.view(-1).view(torch.uint8)
        if source.numel() != destination.numel():
            raise ValueError(f"array of {source.numel()} bytes into a device tensor of {destination.numel()} bytes")
        current = torch.cuda.current_stream(self.device)
        with self._lock:
            self._done.synchronize()  # the last upload's DMA has read the staging buffer
            # Work already queued on the caller's stream may still use the memory being written
            # (the caching allocator hands freed blocks out at once): copy after it.
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                if source.is_pinned():  # already page-locked (lite.pinned_empty): one DMA, no staging
                    destination.copy_(source, non_blocking=True)
                elif self._ring:
                    self._ring_copy(source, destination)
                else:
                    staging = self._buffer(source.numel())
                    for start in range(0, source.numel(), self.chunk_bytes):
                        end = min(start + self.chunk_bytes, source.numel())
                        staging[start:end].copy_(source[start:end])  # multithreaded host copy
                        destination[start:end].copy_(staging[start:end], non_blocking=True)
            self._done.record(self.stream)
            current.wait_event(self._done)

    def wait(self) -> None:
        """Block the host until the last upload has reached the device."""
        self._done.synchronize()

    def _ring_copy(self, source: Any, destination: Any) -> None:
        """Chunk k is staged in slot k mod ``ring_slots`` once the copy engine has read that slot's
        previous chunk (its event), then queued for the device on the side stream."""
        chunk = min(self.chunk_bytes, source.numel())
        for index, start in enumerate(range(0, source.numel(), chunk)):
            end = min(start + chunk, source.numel())
            slot = index % len(self._ring)
            buffer, read = self._ring[slot]
            read.synchronize()  # the copy engine is done with the slot (an event never recorded returns at once)
            if buffer is None or buffer.numel() < chunk:
                buffer = self.torch.empty(chunk, dtype=self.torch.uint8, pin_memory=True)
            staged = buffer[:end - start]
            staged.copy_(source[start:end])  # multithreaded host copy
            destination[start:end].copy_(staged, non_blocking=True)
            read.record(self.stream)
            self._ring[slot] = (buffer, read)

    def _buffer(self, size: int) -> Any:
        if self._staging is None or self._staging.numel() < size:
            self._staging = None  # free the smaller one first
            self._staging = self.torch.empty(size, dtype=self.torch.uint8, pin_memory=True)
        return self._staging


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    # numpy's dtype name is torch's for every type both have (float16, int8, ...), bool aside.
    return torch.bool if dtype == np.bool_ else getattr(torch, dtype.name)
