"""Checks the commands make on a model file before anything reads it or an engine binds it.

:func:`lite.format.load` verifies a .lite file, its structure and the semantics the engines rely
on (opset versions, fused activations), and refuses pipes and devices given as paths; the commands
also refuse a pipe or device given where they read other files (``--input``) before opening it.
"""

from __future__ import annotations

import os
import stat

from lite.errors import ModelFormatError
from lite.format import ir, load


def regular_file(path: str | os.PathLike, what: str = "model file") -> None:
    """Raise unless ``path`` is a regular file: opening a FIFO blocks until a writer comes, and
    reading a device may never end. A missing path is left to the reader's own message."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise ModelFormatError(f"{path} is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        raise ModelFormatError(f"{path} is not a regular file (a pipe, socket or device); give a {what}")


def load_checked(path: str | os.PathLike) -> ir.Model:
    """:func:`lite.format.load` of a regular file."""
    regular_file(path)
    return load(path)
