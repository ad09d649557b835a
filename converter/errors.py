"""Typed errors of the converter.

Every error a user can meet derives from :class:`ConverterError`; the leaves also subclass the
builtin they refine, so ``except ValueError`` keeps working for callers that do not know this
package. Messages name the model, node or tensor, show what was expected and what was found, and
say what to do.
"""

from __future__ import annotations


class ConverterError(Exception):
    """Base of every error raised by the ``converter`` package."""


class ModelImportError(ConverterError, ValueError):
    """The source model cannot be read: missing file, not ONNX, invalid graph, bad external data."""


class InvalidOptionError(ConverterError, ValueError):
    """A conversion option is malformed or contradicts the model (e.g. an unknown input name)."""


class UnsupportedOpsError(ConverterError, NotImplementedError):
    """Nodes use op types or attributes the runtime has no kernel for.

    ``unsupported`` lists every offending node at once as ``(node name, op type, reason)``.
    """

    def __init__(self, message: str, unsupported: list[tuple[str, str, str]]) -> None:
        super().__init__(message)
        self.unsupported = unsupported


class PassError(ConverterError, RuntimeError):
    """A graph pass failed; the message names the pass and the node it was rewriting."""


class VerificationError(ConverterError, ArithmeticError):
    """The converted model's outputs differ from the original's beyond the tolerance."""


class ExportError(ConverterError, ValueError):
    """The converted graph cannot be written in the requested output format."""
