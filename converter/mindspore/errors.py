"""Errors of the MindSpore importers, all under :mod:`converter.errors`.

Each leaf refines :class:`~converter.errors.ModelImportError` (itself a ``ValueError``), so
``except ModelImportError`` catches every unreadable MindSpore input, and callers that only know
the builtins keep working.
"""

from __future__ import annotations

from converter.errors import ModelImportError


class MindIRFormatError(ModelImportError):
    """A .mindir file (or one of its external data files) is damaged, truncated or inconsistent."""


class EncryptedModelError(ModelImportError):
    """A MINDIR/.ckpt file is encrypted and no key was given, or the key/mode does not decrypt it."""


class CheckpointImportError(ModelImportError):
    """A .ckpt file cannot be read, or does not fit the network definition it is loaded into."""


class NetworkDefinitionError(ModelImportError):
    """``--network module:Callable`` cannot be imported, called, or does not build a Cell."""
