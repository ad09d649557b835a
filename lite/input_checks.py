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
import sys
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
_NUMBERS = "biufc"  # numpy dtype kinds: bool, signed and unsigned integers, floats, complex


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
    if isinstance(value, np.ndarray) and not _is_number_scalar(spec, value):
        array = _declared_array(spec, value)
    else:
        array = _converted(spec, _host_value(spec, value))
    _check_shape(spec, array.shape)
    return array


def _is_number_scalar(spec: TensorSpec, array: np.ndarray) -> bool:
    """Whether ``array`` is a 0-d array of numbers for a number input: converted as a numpy scalar
    is (numpy makes one from the other freely), where arrays are held to the declared dtype."""
    return array.ndim == 0 and array.dtype.kind in _NUMBERS and spec.dtype is not None and spec.dtype.kind in _NUMBERS


def _declared_array(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    """A numpy array as given, which must have the declared dtype: an array of another dtype is
    more often a preprocessing slip than a wish to convert, and converting it would cost a copy
    on every call."""
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
    return array


def _host_value(spec: TensorSpec, value: Any) -> Any:
    """A PyTorch tensor in host memory as a numpy array sharing its memory (detached: numpy
    cannot take a tensor that requires grad); anything else as given."""
    torch = sys.modules.get("torch")  # a caller passing a tensor has imported it; never imported here
    if torch is None or not isinstance(value, torch.Tensor):
        return value
    try:
        return value.detach().numpy()
    except (TypeError, RuntimeError) as err:  # bfloat16, a conjugate view, a sparse or meta tensor
        kind = "float32" if spec.dtype is None else spec.dtype.name
        raise InvalidInputError(
            f"input {spec.name!r} is a PyTorch tensor numpy cannot read ({err}); pass a numpy array "
            f"(e.g. tensor.detach().to(torch.{kind}).numpy())"
        ) from err


def _as_array(spec: TensorSpec, value: Any, dtype: np.dtype | None) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError, RuntimeError) as err:  # RuntimeError: a list of tensors requiring grad
        raise InvalidInputError(f"input {spec.name!r} cannot be converted to {spec.dtype}: {err}") from err


def _converted(spec: TensorSpec, value: Any) -> np.ndarray:
    """A list, scalar, 0-d array or host tensor as an array of the declared dtype, where that
    changes no value: integers within the dtype's range, floats into float inputs (rounded to
    their precision), floats without a fractional part into integer inputs. Anything else is an
    :class:`InvalidInputError` naming the first value that would change: numpy's own conversion
    truncates 1.7 into 1 and wraps or raises on integers out of range."""
    if spec.dtype is None or spec.dtype.kind not in _NUMBERS:
        return _as_array(spec, value, spec.dtype)  # undeclared, or strings: as numpy reads them
    given = _as_array(spec, value, None)
    if given.dtype == spec.dtype:
        return given
    if given.dtype.kind not in _NUMBERS or given.dtype.kind == "c" and spec.dtype.kind != "c":
        raise InvalidInputError(
            f"input {spec.name!r} cannot be converted to {spec.dtype}: it holds {_first_odd_value(given)}; "
            f"pass numbers"
        )
    with np.errstate(all="ignore"):  # what the cast loses is found below
        array = given.astype(spec.dtype)
        lost = (np.isfinite(given) & ~np.isfinite(array) if spec.dtype.kind in "fc"
                else array.astype(given.dtype) != given)
    if lost.any():
        raise InvalidInputError(_loss_message(spec, given.flat[np.flatnonzero(lost)[0]].item()))
    return array


def _first_odd_value(given: np.ndarray) -> str:
    """What makes ``given`` no array of numbers: its dtype, or its first value that is no number."""
    if given.dtype.kind in "SU" and given.size:
        return f"text ({given.flat[0].item()!r})"
    if given.dtype != _OBJECT:
        return f"{given.dtype} values"
    for item in given.flat:
        if item is None:
            return "None"
        if not isinstance(item, (int, float, np.number)):
            return f"{type(item).__name__} values ({item!r})"
    return "integers beyond 64 bits"


def _loss_message(spec: TensorSpec, value: Any) -> str:
    """Why ``value`` does not fit the declared dtype, and what to do."""
    where = f"input {spec.name!r} holds {value!r}"
    if spec.dtype.kind in "fc":
        return f"{where}, out of the range of {spec.dtype} (±{np.finfo(spec.dtype).max}): scale the values"
    if isinstance(value, float) and not np.isfinite(value):
        return f"{where}, which {spec.dtype} cannot represent: replace it with a number"
    if isinstance(value, float) and not value.is_integer():
        return (f"{where}, which has a fractional part, the model expects {spec.dtype}: round the values "
                f"(e.g. np.rint(x).astype(np.{spec.dtype.name})) or check that this is the right input")
    if spec.dtype.kind == "b":
        return f"{where}, the model expects bool: pass True/False (or 0/1)"
    info = np.iinfo(spec.dtype)
    return f"{where}, out of the range of {spec.dtype} ([{info.min}, {info.max}])"


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
