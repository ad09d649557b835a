"""A .lite file's bytes for the reader (:mod:`lite.format.reader`): mapped, or read privately.

Decoding a model is the same for a file and for bytes; getting a file's bytes is its own set of
rules. A mapping is read-only and shared between processes, and loading costs the same whatever
the file's size; private memory (``memory_map=False``) is for files that may be rewritten in
place while loaded, and a file that changes while it is read is refused. Paths that are not
regular files (a directory, a pipe that would block the open, a socket, a device) and empty
files are refused by name before any byte is read.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path
from typing import Any

from lite.errors import ModelFormatError, ModelNotFoundError


def file_buffer(path: Path, memory_map: bool) -> mmap.mmap:
    """The bytes of the file at ``path``: mapped read-only, or (``memory_map=False``) read into
    private memory; a missing file is :class:`ModelNotFoundError`, a directory, pipe, socket,
    device or empty file a :class:`ModelFormatError`."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError as err:
        raise ModelNotFoundError(f"model file not found: {path}; check the path") from err
    except IsADirectoryError as err:
        raise ModelFormatError(f"{path} is a directory, not a .lite model file") from err
    before = os.fstat(descriptor)
    if not stat.S_ISREG(before.st_mode):
        os.close(descriptor)
        if stat.S_ISDIR(before.st_mode):
            raise ModelFormatError(f"{path} is a directory, not a .lite model file")
        raise ModelFormatError(f"{path} is not a regular file (a pipe, socket or device): give a .lite file")
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        if before.st_size == 0:
            raise ModelFormatError(f"{path}: the file is empty, not a .lite model")
        if memory_map:
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        return _read_private(handle, path, before)


def _read_private(handle: Any, path: Path, before: os.stat_result) -> mmap.mmap:
    """The whole file in anonymous memory (page-aligned, like a mapping), checked unchanged."""
    buffer = mmap.mmap(-1, before.st_size)
    view, filled = memoryview(buffer), 0
    while filled < before.st_size:
        count = handle.readinto(view[filled:])
        if not count:
            break
        filled += count
    view.release()
    after = os.fstat(handle.fileno())
    changed = (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)
    if filled != before.st_size or changed:
        buffer.close()
        raise ModelFormatError(
            f"{path} changed while it was read ({before.st_size:,} bytes, then {after.st_size:,}): "
            "it is being written; load it again once the writer is done (write to another name and rename)"
        )
    return buffer
