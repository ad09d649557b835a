"""Calibration and evaluation data, streamed sample by sample and re-batched for the model.

Sources (``--calib DATA``, ``--eval DATA``, or ``calibration_data=`` in the API):

- a folder (searched recursively, files in sorted order) or a single file of ``.npy`` / ``.npz``:
  a ``.npy`` holds the model's only input, as one sample (rank one less than the input) or a
  batch; a ``.npz`` holds one array per input name (a single-input model may use any key) and
  optionally ``label``/``labels`` for evaluation;
- a folder of images (.png, .jpg, ...), prepared with the preprocessing spec
  (:mod:`converter.quantize.preprocessing`); images in sub-folders are labelled by the sorted
  index of their sub-folder (ImageNet-style class folders);
- a Python iterable (API only) of arrays (single-input models), dicts ``{input name: array}``
  (optionally with ``"label"``), or ``(inputs, labels)`` pairs.

Only one batch is in memory at a time: files are opened as they are reached.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converter.quantize.errors import CalibrationDataError
from converter.quantize.preprocessing import ImageSpec, bind_spec

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
ARRAY_EXTENSIONS = (".npy", ".npz")
LABEL_KEYS = ("label", "labels")
DataSource = str | os.PathLike | Iterable[Any]


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple  # with the batch dimension; ints, names or None
    whole: bool = False  # no batch axis: each sample's array is fed as given (QuantConfig.whole_samples)

    @property
    def static_batch(self) -> int | None:
        return self.shape[0] if self.shape and isinstance(self.shape[0], int) else None



@dataclass
class Sample:
    feeds: dict[str, np.ndarray]  # one sample per input, no batch dimension
    label: int | None = None


@dataclass
class Batch:
    feeds: dict[str, np.ndarray]
    labels: np.ndarray | None  # int64, one per sample, when every sample has a label
    size: int
    padded: bool = False  # rows beyond ``size`` repeat the last sample (a model of fixed batch size)


def describe_source(source: DataSource) -> str:
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    return f"<{type(source).__name__}>"


def is_image_folder(source: DataSource) -> bool:
    """Whether ``source`` is a path whose samples are images (no .npy/.npz arrays beside them)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = Path(source)
    if path.is_file():
        return path.suffix.lower() in IMAGE_EXTENSIONS
    if not path.is_dir():
        return False
    suffixes = {p.suffix.lower() for p in path.rglob("*") if p.is_file()}
    return bool(suffixes & set(IMAGE_EXTENSIONS)) and not suffixes & set(ARRAY_EXTENSIONS)


def samples(source: DataSource, inputs: list[InputSpec], spec: dict[str, Any] | None = None) -> Iterator[Sample]:
    """Every sample of ``source``, lazily."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise CalibrationDataError(f"{path}: no such file or folder; pass a folder of .npy/.npz files or images")
        return _path_samples(path, inputs, spec)
    if isinstance(source, (bytes, np.ndarray)):
        return _iterable_samples([source] if isinstance(source, np.ndarray) else [], inputs)
    if isinstance(source, Iterable):
        return _iterable_samples(source, inputs)
    raise CalibrationDataError(
        f"calibration data of type {type(source).__name__} is not supported: pass a folder path or an iterable of arrays"
    )


def batches(source: DataSource, inputs: list[InputSpec], batch_size: int, limit: int,
            spec: dict[str, Any] | None = None) -> Iterator[Batch]:
    """Samples of ``source`` (at most ``limit``) stacked into batches of the model's batch size
    (fixed by the model, else ``batch_size``)."""
    whole = unbatched(inputs)
    static = {spec_.static_batch for spec_ in inputs if spec_.name not in whole} - {None}
    fixed = len(static) == 1
    size = next(iter(static)) if fixed else batch_size
    if inputs and all(spec_.whole for spec_ in inputs):
        size = 1  # samples fed as given: none to stack
    pending: list[Sample] = []
    for count, sample in enumerate(samples(source, inputs, spec), start=1):
        pending.append(sample)
        if len(pending) == size:
            yield _stack(pending, inputs)
            pending = []
        if count >= limit:
            break
    if pending:
        real = len(pending)
        if fixed:  # a fixed batch size: pad with the last sample; consumers use the first ``size`` rows
            pending = pending + [pending[-1]] * (size - real)
        batch = _stack(pending, inputs)
        batch.size, batch.padded = real, len(pending) > real
        if batch.labels is not None:
            batch.labels = batch.labels[:real]
        yield batch


def _stack(items: list[Sample], inputs: list[InputSpec]) -> Batch:
    whole = unbatched(inputs)
    feeds = {spec.name: (np.asarray(items[0].feeds[spec.name]) if spec.name in whole
                         else np.stack([item.feeds[spec.name] for item in items])).astype(spec.dtype, copy=False)
             for spec in inputs}
    labels = None
    if all(item.label is not None for item in items):
        labels = np.array([item.label for item in items], dtype=np.int64)
    return Batch(feeds, labels, len(items))


def _path_samples(path: Path, inputs: list[InputSpec], spec: dict[str, Any] | None) -> Iterator[Sample]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    arrays = [p for p in files if p.suffix.lower() in ARRAY_EXTENSIONS]
    images = [p for p in files if p.suffix.lower() in IMAGE_EXTENSIONS]
    if arrays:
        for file in arrays:
            yield from _array_file_samples(file, inputs)
    elif images:
        image_spec = bind_spec(spec or {}, [(i.name, i.dtype, i.shape) for i in inputs])
        yield from _image_samples(path, images, image_spec, inputs)
    else:
        raise CalibrationDataError(
            f"{path}: found no .npy/.npz or image files; calibration data is a folder of .npy/.npz arrays "
            f"or images ({', '.join(IMAGE_EXTENSIONS)})"
        )


def _array_file_samples(file: Path, inputs: list[InputSpec]) -> Iterator[Sample]:
    try:
        loaded = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise CalibrationDataError(f"{file}: not a readable .npy/.npz file ({err})") from err
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise CalibrationDataError(
                f"{file}: a .npy file feeds a single-input model; this model has inputs "
                f"{', '.join(i.name for i in inputs)}: use .npz files with one array per input name"
            )
        arrays, labels = {inputs[0].name: loaded}, None
    else:
        try:
            arrays, labels = _npz_arrays(loaded, inputs, file)
        except CalibrationDataError:
            raise
        except ValueError as err:  # numpy reads an .npz's arrays when asked for them
            if "allow_pickle" not in str(err):
                raise CalibrationDataError(f"{file}: not a readable .npz file ({err})") from err
            raise CalibrationDataError(
                f"{file}: holds an array of Python objects (strings saved as dtype=object, say), which lite "
                "does not unpickle: save text as fixed-width strings (np.array(texts, dtype=str))"
            ) from err
    yield from _split(arrays, labels, inputs, str(file))


def _npz_arrays(loaded: Any, inputs: list[InputSpec], file: Path) -> tuple[dict[str, np.ndarray], Any]:
    with loaded:
        keys = list(loaded.keys())
        label_key = next((k for k in LABEL_KEYS if k in keys), None)
        labels = np.asarray(loaded[label_key]) if label_key else None
        data_keys = [k for k in keys if k != label_key]
        if len(inputs) == 1 and inputs[0].name not in data_keys and len(data_keys) == 1:
            return {inputs[0].name: loaded[data_keys[0]]}, labels
        missing = [i.name for i in inputs if i.name not in data_keys]
        if missing:
            raise CalibrationDataError(f"{file}: no array for input(s) {missing}; keys found: {keys}")
        return {i.name: loaded[i.name] for i in inputs}, labels


def _split(arrays: dict[str, np.ndarray], labels: Any, inputs: list[InputSpec], where: str) -> Iterator[Sample]:
    """Rows of possibly batched arrays as single samples. A rank-0 input is the same for every
    sample, and so is an input given one row beside others given several (a recurrent model's
    initial state recorded once, beside a run of its inputs): numpy's broadcasting."""
    batched: dict[str, np.ndarray] = {}
    shared: dict[str, np.ndarray] = {}
    whole = unbatched(inputs)
    for spec in inputs:
        array = np.asarray(arrays[spec.name])
        if spec.name in whole:
            shared[spec.name] = _whole(array, spec, where)
            continue
        rank = len(spec.shape) if spec.shape is not None else array.ndim
        if array.ndim == rank - 1:
            array = array[None]
        elif array.ndim != rank:
            raise CalibrationDataError(
                f"{where}: input {spec.name!r} has shape {list(array.shape)}; the model expects rank {rank} "
                f"(shape {list(spec.shape)}) with the batch dimension, or rank {rank - 1} for one sample"
            )
        for axis, (dim, size) in enumerate(zip(spec.shape[1:], array.shape[1:]), start=1):
            if isinstance(dim, int) and dim != size:
                raise CalibrationDataError(
                    f"{where}: input {spec.name!r} has size {size} on axis {axis}; the model expects {dim} "
                    f"(shape {list(spec.shape)})"
                )
        batched[spec.name] = array
    counts = {array.shape[0] for array in batched.values()}
    if len(counts) == 2 and 1 in counts:
        for name in [name for name, array in batched.items() if array.shape[0] == 1]:
            shared[name] = batched.pop(name)[0]
        counts.discard(1)
    if len(counts) > 1:
        listing = ", ".join(f"{name} {array.shape[0]}" for name, array in batched.items())
        raise CalibrationDataError(
            f"{where}: inputs have different numbers of samples ({listing}); give every input the same number of "
            "rows (the first axis), or one row for an input that is the same for every sample"
        )
    count = counts.pop() if counts else 1
    label_array = None if labels is None else np.asarray(labels).reshape(-1)
    if label_array is not None and label_array.size != count:
        raise CalibrationDataError(f"{where}: {label_array.size} labels for {count} samples")
    for row in range(count):
        label = None if label_array is None else int(label_array[row])
        yield Sample({**{name: array[row] for name, array in batched.items()}, **shared}, label)


def unbatched(inputs: list[InputSpec]) -> set[str]:
    """Inputs without a batch axis, the same for every sample of a batch: rank 0 (a Loop's trip
    count), a fixed first size where another input's first size is symbolic (a per-channel
    scale ``[8]`` beside ``x[N, 8]``), or any the caller says are fed whole (``whole_samples``)."""
    symbolic = any(spec.shape and not isinstance(spec.shape[0], int) for spec in inputs)
    return {spec.name for spec in inputs if spec.whole or (
        spec.shape is not None and (len(spec.shape) == 0 or symbolic and isinstance(spec.shape[0], int)))}


def _whole(array: np.ndarray, spec: InputSpec, where: str) -> np.ndarray:
    """An unbatched input's value: its declared shape, or that shape with a leading axis of 1."""
    declared = tuple(spec.shape)
    fits = len(array.shape) == len(declared) and all(not isinstance(d, int) or d == n
                                                      for d, n in zip(declared, array.shape))
    if not fits and array.ndim == len(declared) + 1 and array.shape[0] == 1:
        return _whole(array[0], spec, where)
    if not fits:
        raise CalibrationDataError(
            f"{where}: input {spec.name!r} has shape {list(array.shape)}; the model takes it whole, without a "
            f"batch axis, as {list(declared)}"
        )
    return array


def _image_samples(root: Path, images: list[Path], spec: ImageSpec, inputs: list[InputSpec]) -> Iterator[Sample]:
    if len(inputs) != 1:
        raise CalibrationDataError("image folders feed single-input models; use .npz files for several inputs")
    classes: dict[str, int] = {}
    if root.is_dir():
        folders = sorted({p.relative_to(root).parts[0] for p in images if len(p.relative_to(root).parts) > 1})
        classes = {name: index for index, name in enumerate(folders)}
    for image in images:
        parts = image.relative_to(root).parts if root.is_dir() else (image.name,)
        label = classes.get(parts[0]) if len(parts) > 1 else None
        yield Sample({spec.input_name: spec.load(image)}, label)


def _iterable_samples(source: Iterable[Any], inputs: list[InputSpec]) -> Iterator[Sample]:
    for position, item in enumerate(source):
        where = f"calibration item {position}"
        labels = None
        if isinstance(item, tuple) and len(item) == 2:
            item, labels = item
        if isinstance(item, dict):
            item = dict(item)
            for key in LABEL_KEYS:
                if key in item:
                    labels = item.pop(key)
            missing = [spec.name for spec in inputs if spec.name not in item]
            if missing:
                raise CalibrationDataError(f"{where}: no array for input(s) {missing}; keys: {sorted(item)}")
            arrays = {spec.name: item[spec.name] for spec in inputs}
        else:
            if len(inputs) != 1:
                raise CalibrationDataError(
                    f"{where}: a bare array feeds a single-input model; yield dicts {{input name: array}} for inputs "
                    f"{', '.join(i.name for i in inputs)}"
                )
            arrays = {inputs[0].name: item}
        if labels is not None and np.ndim(labels) == 0:
            labels = [labels]
        yield from _split(arrays, labels, inputs, where)
