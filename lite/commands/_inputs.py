"""Inputs for ``lite run`` and ``lite bench``: read from .npy/.npz files, or made up from the signature."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lite.commands._model_file import regular_file
from lite.errors import InvalidInputError
from lite.model import Model
from lite.sample_inputs import runnable_feeds
from lite.signature import TensorSpec


def parse_shape_overrides(values: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``name:1,3,224,224`` pairs (or a bare ``1,3,224,224`` for a single-input model)."""
    shapes = {}
    for value in values or []:
        name, _, dims = value.rpartition(":")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError as err:
            raise ValueError(f"--shape {value!r}: expected NAME:D1,D2,... with integer dimensions") from err
    return shapes


def read_inputs(model: Model, pairs: list[str]) -> dict[str, np.ndarray]:
    """``name=file.npy`` pairs; a bare ``file.npy`` for a single-input model; ``file.npz`` holds several."""
    feeds: dict[str, np.ndarray] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep:
            name, path = "", pair
        file = Path(path)
        if not file.exists():
            raise FileNotFoundError(f"--input {pair!r}: file {file} does not exist")
        regular_file(file, "a .npy/.npz file")
        try:
            loaded = np.load(file, allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"--input {pair!r}: {file} is not a .npy/.npz file without pickled objects ({err})") from err
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                feeds.update({key: loaded[key] for key in loaded.files})
            continue
        if not name:
            if len(model.inputs) != 1:
                raise InvalidInputError(f"--input {pair!r}: the model has {len(model.inputs)} inputs; write NAME=FILE")
            name = model.inputs[0].name
        feeds[name] = loaded
    return feeds


def named_shapes(inputs: list[TensorSpec], shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """``--shape`` overrides keyed by input name (a bare shape names a single-input model's
    input); a name the model (its ``inputs``) has no input of is an error naming the ones it has."""
    specs = {spec.name: spec for spec in inputs}
    names = list(specs)
    named = {}
    for name, shape in shapes.items():
        if not name:
            if len(names) != 1:
                raise InvalidInputError(f"--shape {_dims(shape)}: the model has {len(names)} inputs "
                                        f"({', '.join(names)}); write NAME:D1,D2,...")
            name = names[0]
        elif name not in names:
            raise InvalidInputError(f"--shape {name}:{_dims(shape)}: the model has no input {name!r}; "
                                    f"its inputs: {', '.join(names)}")
        _check_against_signature(specs[name], shape)
        named[name] = shape
    return named


def _check_against_signature(spec, shape: tuple[int, ...]) -> None:
    """A --shape of the input's rank that keeps the sizes the model fixes."""
    if spec.shape is None:
        return
    expected = "[" + ", ".join("?" if dim is None else str(dim) for dim in spec.shape) + "]"
    if len(shape) != len(spec.shape):
        raise InvalidInputError(f"--shape {spec.name}:{_dims(shape)}: rank {len(shape)}, the model's input has "
                                f"rank {len(spec.shape)} ({spec.name}{expected})")
    for axis, (dim, size) in enumerate(zip(spec.shape, shape)):
        if isinstance(dim, int) and dim != size:
            raise InvalidInputError(f"--shape {spec.name}:{_dims(shape)}: dimension {axis} is fixed at {dim} by the "
                                    f"model, {size} given ({spec.name}{expected})")


def _dims(shape: tuple[int, ...]) -> str:
    return ",".join(str(size) for size in shape)


def random_inputs(model: Model, batch: int, shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays the model runs on: ``shapes`` (``--shape``, see :func:`named_shapes`) where
    given; otherwise symbolic leading dims take ``batch`` (so do dims of the same name on other
    axes), the others the sizes the model records (:func:`lite.signature.sample_shapes`), else
    sizes and values planned from the graph and tried on the model (:mod:`lite.sample_inputs`).
    Raises :class:`lite.errors.SampleInputError`, naming the inputs to give ``--shape`` for, when
    none runs."""
    feeds, _ = runnable_feeds(model.ir, batch, model.predict, named_shapes(model.inputs, shapes), seed)
    return feeds


def describe_inputs(model: Model, feeds: dict[str, np.ndarray]) -> str:
    """The inputs a run used, e.g. ``images float32[1, 3, 320, 320]``, and which of the model's
    dimensions are symbolic (their sizes were chosen by the caller, not fixed by the model)."""
    specs = {spec.name: spec for spec in model.inputs}
    parts = []
    for name, value in feeds.items():
        text = f"{name} {value.dtype}{list(value.shape)}"
        spec = specs.get(name)
        if spec is not None and spec.shape is not None:
            symbolic = [f"{dim or f'dimension {axis}'}={size}"
                        for axis, (dim, size) in enumerate(zip(spec.shape, value.shape)) if not isinstance(dim, int)]
            if symbolic:
                text += f" ({', '.join(symbolic)})"
        parts.append(text)
    return "; ".join(parts)
