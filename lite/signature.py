"""A model's signature, and what callers derive from it without loading an engine.

:class:`TensorSpec` (name, element type, shape of an input or output), :func:`file_identity`
(what caches key a model file on) and the shapes of inputs that fit a signature (:func:`concrete_shape`,
:func:`batch_names`), sized where the model says how (:func:`sample_shapes`, :func:`sample_values`);
:mod:`lite.sample_inputs` makes random inputs from them. Kept apart from :mod:`lite.model`, so that
autotuning and the commands use them without importing the model class, and nothing imports in a circle.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from lite.errors import InvalidInputError, ModelNotFoundError
from lite.format import ir
from lite.format.dtypes import DataType, storage_dtype


@dataclass(frozen=True)
class TensorSpec:
    """Name, element type and shape of a model input or output.

    ``shape`` holds ints for fixed dimensions, strings for symbolic ones (``"N"``) and None for
    unknown ones; it is None when even the rank is unknown. ``dtype`` is the numpy type arrays
    must have (None when the model does not say).
    """

    name: str
    dtype: np.dtype | None
    shape: tuple[int | str | None, ...] | None
    kind: str = "tensor"  # "tensor", "sequence" (a list of arrays) or "optional" (an array or None)

    @classmethod
    def of(cls, tensor: ir.Tensor, kind: str = "tensor") -> TensorSpec:
        dtype = None if tensor.dtype == DataType.UNDEFINED else storage_dtype(tensor.dtype)
        return cls(tensor.name, dtype, tensor.shape, kind)


def file_identity(path: str | os.PathLike) -> str:
    """Names the weights of a file for caches: its real path, size, modification time and inode."""
    try:
        stat = os.stat(path)
    except FileNotFoundError as err:
        raise ModelNotFoundError(f"model file not found: {path}; check the path") from err
    # A path need not be UTF-8 (a latin-1 file name reads as surrogate escapes, which keys
    # encoded as UTF-8 refuse): its bytes, undecodable ones as escapes, so distinct paths stay so.
    real = os.fsencode(os.path.realpath(path)).decode("utf-8", "backslashreplace")
    return f"{real}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


# Model metadata: input shapes the model is known to run on, as the converter records them.
SAMPLE_SHAPES_KEY = "lite.sample_shapes"
# ... and values of its one-element integer and boolean inputs (a sample rate, a flag) it ran on.
SAMPLE_VALUES_KEY = "lite.sample_values"


def sample_shapes(model: ir.Model) -> dict[str, tuple[int, ...]]:
    """Input name -> a shape the model is known to run on, for inputs with symbolic dimensions
    other than the batch: the converter records the shapes its verification ran the original on
    (planned from the graph, or the user's samples) under :data:`SAMPLE_SHAPES_KEY`. Random
    inputs of 1 for every symbolic size mean a 1x1 image to a detector with a ``[-1, 3, ?, ?]``
    input, which its own layers reject or which times nothing like a real call. Empty where the
    file records none (or something unreadable)."""
    recorded = _recorded(model, SAMPLE_SHAPES_KEY)
    return {name: tuple(shape) for name, shape in recorded.items()
            if isinstance(shape, list) and all(type(d) is int and d > 0 for d in shape)}


def sample_values(model: ir.Model) -> dict[str, int | bool]:
    """Input name -> the value the converter's verification ran the model on, for one-element
    integer and boolean inputs (:data:`SAMPLE_VALUES_KEY`). Random integers in [0, 10) for Silero
    VAD's sample rate, which the graph compares with 16000 and 8000, take a branch that rejects
    16 kHz chunks. Empty where the file records none (or something unreadable)."""
    return {name: value for name, value in _recorded(model, SAMPLE_VALUES_KEY).items() if type(value) in (int, bool)}


def _recorded(model: ir.Model, key: str) -> dict:
    """The JSON object the converter recorded under metadata ``key``; empty if absent or unreadable."""
    try:
        recorded = json.loads(model.metadata.get(key, "{}"))
    except ValueError:
        return {}
    return recorded if isinstance(recorded, dict) else {}


def batch_names(specs) -> frozenset[str]:
    """The names of the symbolic leading dimensions of ``specs`` (the inputs): the batch, which
    other axes may share by name, as a recurrent state's ``[2, batch, 128]`` does."""
    return frozenset(spec.shape[0] for spec in specs if spec.shape and isinstance(spec.shape[0], str))


def concrete_shape(spec: TensorSpec, batch: int, sample: tuple[int, ...] | None = None,
                   batch_dims: frozenset[str] = frozenset()) -> tuple[int, ...]:
    """``spec``'s shape with a symbolic leading dimension set to ``batch`` and the other symbolic
    ones taken from ``sample`` (a shape the model runs on, :func:`sample_shapes`), else 1. A
    dimension named like the inputs' leading ones (``batch_dims``, :func:`batch_names`) is the
    batch on any axis: one size for a name across inputs, whatever batch the sample was
    recorded with."""
    if spec.shape is None:
        raise InvalidInputError(f"input {spec.name!r} has unknown rank; give its shape with --shape {spec.name}:D1,D2,...")
    if sample is not None and (len(sample) != len(spec.shape) or any(
            isinstance(d, int) and d != s for d, s in zip(spec.shape, sample))):
        sample = None  # recorded for another signature: not this input's
    return tuple(d if isinstance(d, int) else batch if axis == 0 or d in batch_dims else sample[axis] if sample else 1
                 for axis, d in enumerate(spec.shape))

