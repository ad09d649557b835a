"""Atomic file replacement: a reader sees the old file or the complete new one, never a part.

Every writer of an output file in the runtime and the converter goes through this module. The
temporary file sits beside the destination (a rename across file systems is not atomic), has an
unpredictable name and is created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``, what
:func:`tempfile.mkstemp` does): a file or symlink planted at a guessable temporary path can
neither be written through nor be renamed over the destination. Unlike ``mkstemp``'s 0600, the
file gets the permissions an ordinary ``open(path, "w")`` would (0666 less the umask), so a model
written for a server running as another user stays readable.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_CREATE_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_ATTEMPTS = 100  # name collisions on 64 random bits; only a planted file would ever cost one


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a fresh temporary file beside ``path``; on success fsync it and rename it over ``path``.

    If the block raises (or the process dies), ``path`` is untouched and the temporary file is
    removed (or, after a hard kill, left as a hidden ``.NAME.*.tmp`` that never shadows ``path``).
    """
    target = Path(path)
    descriptor, temporary = _create_temporary(target)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """The path of a fresh, empty temporary file beside ``path``, for writers that take a file name.

    The block writes the file by name (and may read it back, e.g. to verify it); on success the
    file is fsynced and renamed over ``path``. On failure it is removed and ``path`` is untouched.
    """
    target = Path(path)
    descriptor, temporary = _create_temporary(target)
    os.close(descriptor)
    try:
        yield temporary
        _fsync_file(temporary)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Raise what :func:`atomic_write` would raise for ``path`` (``what`` names it: "--json"), so
    that a command can refuse a destination before a long computation instead of after it: a path
    that names no file ("/", "."), a folder, a missing or read-only parent folder."""
    target = Path(path)
    if not target.name or target.name in (".", "..") or target.is_dir():
        raise IsADirectoryError(f"{what} {os.fspath(path)!r} is a folder, not a file to write; name a file in it")
    descriptor, temporary = _create_temporary(target)
    os.close(descriptor)
    temporary.unlink(missing_ok=True)


def _create_temporary(target: Path) -> tuple[int, Path]:
    """(descriptor, path) of a new file ``.NAME.<random>.tmp`` beside ``target``, created exclusively."""
    for _ in range(_ATTEMPTS):
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(temporary, _CREATE_FLAGS, 0o666), temporary
        except FileExistsError:
            continue
        except OSError as err:  # a read-only or missing folder: name the file asked for, not ours
            raise type(err)(err.errno, err.strerror, str(target)) from err
    raise FileExistsError(
        f"could not create a temporary file beside {target}: {_ATTEMPTS} random names were all taken; "
        "check the folder for planted .tmp files"
    )


def _fsync_file(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


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
