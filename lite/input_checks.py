"""Checking what ``lite.Model.predict`` is given against the model's declared inputs.

Every call of a served model passes through here, so the checks come in two speeds: the common
call (numpy arrays of the declared dtypes, ranks and fixed sizes) is recognized in a few
comparisons prepared once per model (:func:`plain_checks`, :func:`is_plain`); anything else
takes :func:`check_input`, which converts lists, accepts GPU arrays and sequences, and raises
:class:`lite.errors.InvalidInputError` naming the input, what it got and what the model expects.
Symbolic dimensions are not held to one size (:func:`symbol_disagreement` only explains a run
that then fails).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from lite.device_arrays import device_array_spec, is_device_array, torch_cuda_spec
from lite.errors import InvalidInputError
from lite.signature import TensorSpec


def plain_checks(specs: list[TensorSpec]) -> tuple[tuple[Any, ...], ...] | None:
    """Per input: name, dtype, rank, and a getter of its fixed dimensions and their sizes (None,
    None when none are fixed); for :func:`is_plain`. None where those checks would not be the whole
    check: an input of unknown type or rank, a sequence or optional."""
    checks = []
    for spec in specs:
        if spec.kind != "tensor" or spec.dtype is None or spec.shape is None:
            return None
        axes = [axis for axis, dim in enumerate(spec.shape) if isinstance(dim, int)]
        getter = operator.itemgetter(*axes) if axes else None
        checks.append((spec.name, spec.dtype, len(spec.shape), getter, getter(spec.shape) if axes else None))
    return tuple(checks)


def is_plain(checks: tuple[tuple[Any, ...], ...], inputs: dict[str, Any]) -> bool:
    """Whether ``inputs`` are exactly the model's inputs, as numpy arrays of the declared dtypes,
    ranks and fixed sizes."""
    if len(inputs) != len(checks):
        return False
    for name, dtype, rank, fixed_sizes, sizes in checks:
        value = inputs.get(name)
        if type(value) is not np.ndarray or value.dtype != dtype:
            return False
        shape = value.shape
        if len(shape) != rank or fixed_sizes is not None and fixed_sizes(shape) != sizes:
            return False
    return True


def symbol_disagreement(specs: list[TensorSpec], feeds: dict[str, Any]) -> str | None:
    """The first symbolic dimension that ``feeds`` give two sizes, as text; None where they agree.

    Inputs that name a dimension alike usually share its size, but ONNX Runtime does not require
    it, and exporters rely on that: Hugging Face optimum's merged decoders take a cache of length 0
    on their first step, beside an attention mask of the real length, under one name. So a
    disagreement is not refused; it is named when the run then fails."""
    seen: dict[str, tuple[int, str]] = {}
    for spec in specs:
        shape = getattr(feeds.get(spec.name), "shape", None)
        if spec.shape is None or shape is None or len(shape) != len(spec.shape):
            continue
        for axis, (dim, size) in enumerate(zip(spec.shape, shape)):
            if isinstance(dim, str):
                first = seen.setdefault(dim, (size, f"{spec.name!r} axis {axis}"))
                if first[0] != size:
                    return f"dimension {dim!r} is {size} on input {spec.name!r} axis {axis} but {first[0]} on {first[1]}"
    return None


_OBJECT = np.dtype(object)


def check_input(spec: TensorSpec, value: Any) -> Any:
    """``value`` as the engine takes input ``spec`` (lists converted), or :class:`InvalidInputError`
    saying what it got and what the model expects."""
    if type(value) is np.ndarray and spec.kind == "tensor" and spec.dtype is not None and value.dtype == spec.dtype:
        _check_shape(spec, value.shape)  # the common case first: every request of a server
        return value
    cuda = torch_cuda_spec(value)
    if cuda is not None and spec.kind == "tensor":  # the common GPU call, without DLPack calls
        shape, dtype = cuda
        if spec.dtype is not None and dtype != spec.dtype:
            raise InvalidInputError(f"input {spec.name!r} (on the GPU) has dtype {dtype}, the model expects {spec.dtype}")
        _check_shape(spec, shape)
        return value
    if spec.kind == "sequence":
        if not isinstance(value, (list, tuple)):
            raise InvalidInputError(f"input {spec.name!r} is a sequence: pass a list of arrays, got {type(value).__name__}")
        return [np.asarray(item) for item in value]
    if spec.kind == "optional" and (value is None or isinstance(value, (list, tuple))):
        return None if value is None else [np.asarray(item) for item in value]  # empty, or a sequence
    if spec.dtype is None and spec.shape is None and (value is None or isinstance(value, (list, tuple))):
        # Undeclared type: a list stays a list (a sequence), None stays None (an empty optional).
        return list(value) if value is not None else None
    if is_device_array(value):
        shape, dtype = device_array_spec(value)
        if spec.dtype is not None and dtype != spec.dtype:
            raise InvalidInputError(f"input {spec.name!r} (on the GPU) has dtype {dtype}, the model expects {spec.dtype}")
        _check_shape(spec, shape)
        return value
    if isinstance(value, np.ndarray):
        array = value
        if spec.dtype == _OBJECT and array.dtype.kind in "SU":
            array = array.astype(object)  # fixed-width bytes/str arrays hold the same strings
        if spec.dtype == _OBJECT and array.dtype != _OBJECT:
            # .astype(object) of numbers keeps numbers: the hint is to pass text.
            raise InvalidInputError(
                f"input {spec.name!r} has dtype {array.dtype}, the model expects strings: "
                "pass an array of str (e.g. np.array(['a', 'b']))"
            )
        if spec.dtype is not None and array.dtype != spec.dtype:
            raise InvalidInputError(
                f"input {spec.name!r} has dtype {array.dtype}, the model expects {spec.dtype} "
                f"(convert with .astype(np.{spec.dtype.name}))"
            )
    else:
        try:
            array = np.asarray(value, dtype=spec.dtype)
        except (TypeError, ValueError) as err:
            raise InvalidInputError(f"input {spec.name!r} cannot be converted to {spec.dtype}: {err}") from err
    _check_shape(spec, array.shape)
    return array


def _check_shape(spec: TensorSpec, shape: tuple[int, ...]) -> None:
    """Rank and fixed dimensions as declared (symbolic ones: :func:`symbol_disagreement`)."""
    if spec.shape is None:
        return
    if len(shape) != len(spec.shape):
        raise InvalidInputError(
            f"input {spec.name!r} has rank {len(shape)} (shape {list(shape)}), "
            f"the model expects rank {len(spec.shape)} (shape {list(spec.shape)})"
        )
    for axis, (dim, size) in enumerate(zip(spec.shape, shape)):
        if isinstance(dim, int) and dim != size:
            raise InvalidInputError(
                f"input {spec.name!r} has size {size} on axis {axis} (shape {list(shape)}), "
                f"the model expects {dim} (shape {list(spec.shape)})"
            )
