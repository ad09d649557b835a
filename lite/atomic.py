"""Atomic file replacement: a reader sees the old file or the complete new one, never a part."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path``; on success fsync it and rename it over ``path``.

    If the block raises (or the process dies), ``path`` is untouched and the temporary file is
    removed (or, after a hard kill, left as a hidden ``.NAME.*.tmp`` that never shadows ``path``).
    """
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform, and not needed for atomicity.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
