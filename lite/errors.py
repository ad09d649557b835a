"""Typed errors of the runtime.

Every error a user can meet derives from :class:`LiteError`; the leaves also subclass the
builtin they refine, so ``except ValueError`` keeps working for callers that do not know
this package.
"""

from __future__ import annotations


class LiteError(Exception):
    """Base of every error raised by the ``lite`` runtime."""


class ModelFormatError(LiteError, ValueError):
    """A .lite file (or bytes) is damaged, hostile or of an unsupported version.

    The message names what is wrong and where (table, field, index), and what to do.
    """


class ModelNotFoundError(LiteError, FileNotFoundError):
    """No file at the model path given to ``Model.load`` (or the CLI)."""


class UnsupportedOpError(LiteError, NotImplementedError):
    """A node uses an op type, opset version or attribute that no engine implements."""


class InvalidInputError(LiteError, ValueError):
    """The inputs given to ``Model.predict`` do not match the model's signature."""


class SampleInputError(InvalidInputError):
    """Random inputs made up for a model (benchmarks, autotuning) do not run it: sizes or values
    the signature leaves open that the graph does not reveal. The message names the inputs whose
    sizes were chosen and the failure; ``inputs`` holds those names."""

    inputs: tuple[str, ...] = ()


class EngineFallbackWarning(UserWarning):
    """``device="auto"`` runs the model on the numpy engine because ONNX Runtime refused it (an
    IR or opset version the installed ONNX Runtime does not load, a kernel it lacks); the message
    gives ONNX Runtime's reason, ``reason`` alone."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"device='auto' runs this model on the numpy engine: {reason}")
        self.reason = reason


class AutotuneSkippedWarning(UserWarning):
    """``engine="auto"`` measured nothing, as its random inputs do not run the model, and bound
    the engine ``Model.load`` binds by default instead; the message says why and how to give
    input shapes, ``reason`` why alone."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"engine='auto' measured no engine and binds the one engine=None binds: {reason}")
        self.reason = reason


class EngineUnavailableError(LiteError, RuntimeError):
    """A requested device or engine cannot be used here (missing package, no GPU)."""


class KernelError(LiteError, RuntimeError):
    """A kernel failed while running a node; the message names the node and op type, and
    ``node`` (when the engine knows it) is the :class:`lite.format.ir.Node` itself."""

    node = None


class InputValueError(KernelError, InvalidInputError):
    """A kernel refused values the inputs led it to (an index past its table, ONNX Runtime's
    INVALID_ARGUMENT): the model runs on other inputs, so the caller's are at fault. Both a
    :class:`KernelError` (the message names the node) and an :class:`InvalidInputError` (a
    server answers INVALID_ARGUMENT, not INTERNAL)."""


class PreprocessingError(LiteError, ValueError):
    """A preprocessing spec is invalid, or an image cannot be decoded or prepared with it."""
