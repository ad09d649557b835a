"""Typed errors of the training core.

Every error a user can meet derives from :class:`TrainError`; the leaves also subclass the
builtin they refine, so ``except ValueError`` keeps working for callers that do not know
this package.
"""

from __future__ import annotations


class TrainError(Exception):
    """Base of every error raised by the ``train`` package."""


class ShapeError(TrainError, ValueError):
    """An op or layer got an input whose shape or dtype it cannot take; the message says which."""


class GradientError(TrainError, RuntimeError):
    """``grad``/``value_and_grad`` was asked for something it cannot differentiate."""


class CheckpointError(TrainError, ValueError):
    """A .ckpt file is damaged or does not fit the network it is loaded into."""


class ExportError(TrainError, ValueError):
    """A network cannot be exported to the requested format (unknown op, bad arguments)."""


class DatasetError(TrainError, ValueError):
    """A dataset folder or file is missing, damaged or of an unexpected layout."""


class ConfigurationError(TrainError, ValueError):
    """A setting (thread count, seed, schedule) was given a value it cannot take."""


class MissingDependencyError(TrainError, ImportError):
    """An optional package (Pillow, scikit-learn, onnx, matplotlib) is needed and not installed."""


class CustomKernelError(TrainError, RuntimeError):
    """A compiled custom kernel (``train.ops.Custom``) could not be loaded or returned an error code."""
