"""Weights stored in files beside the model (ONNX IR spec, "External Tensor Data").

A tensor's ``external_data`` names a ``location`` (a path relative to the model's folder), an
``offset`` and a ``length`` (https://onnx.ai/onnx/repo-docs/ExternalData.html). The model file
chooses these, and a model file is untrusted input: a location such as ``../../etc/passwd``,
an absolute path, or a symlink in the model's folder pointing elsewhere would otherwise make the
converter copy that file's bytes into the weights it writes. Every route into the converter (a
path, bytes, an ``onnx.ModelProto``, an ``onnx_ir.Model``) therefore passes
:func:`check_external_data` before any pass reads a weight:

- the data must lie in a regular file inside the model's folder, after resolving symlinks (or,
  in a Hugging Face hub cache, in the ``blobs/`` folder the snapshot's links lead to);
- a model given in memory has no folder: its external data is refused unless the caller names
  the folder (``external_data_dir``); it is never looked up relative to the working directory;
- ``offset`` and ``length`` must fit the file and the tensor's dims.

Each refusal is a :class:`ModelImportError` naming the tensor and its location.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx_ir as ir

from converter.contained_files import contained_file
from converter.errors import ModelImportError


def check_external_data(model: ir.Model, base_dir: str | os.PathLike | None, what: str,
                        model_file: Path | None = None) -> tuple[Path | None, dict[str, str]]:
    """Check every external tensor of ``model`` against ``base_dir`` and map its data.

    ``base_dir`` is the folder external locations are relative to: the model file's folder, the
    caller's ``external_data_dir``, or None when there is none. For an ``onnx_ir.Model`` built by
    the caller (``base_dir`` None), each tensor's own ``base_dir`` is used when it has one.
    ``model_file``: the model's path; when it is a link, data linked into the folder it resolves
    to is accepted too, and read from there (:func:`_linked_home`).
    Returns the folder the tensors were read from (None when the model has no external data) and,
    for data read through such links, each tensor's location in that folder.
    """
    used: Path | None = None
    home = _linked_home(model_file)
    relocated: dict[str, str] = {}
    for tensor in list(external_tensors(model)):
        folder = base_dir if base_dir is not None else (tensor.base_dir or None)
        label = f"{what}: tensor {tensor.name!r} (external data {str(tensor.location)!r})"
        if folder is None:
            raise ModelImportError(
                f"{label}: its data is in a file beside the model, and a model given in memory has no "
                "folder; pass external_data_dir=<the folder the model was saved in>, or convert the "
                ".onnx file by its path"
            )
        folder = Path(os.path.abspath(folder))
        location = _linked_location(folder, os.fspath(tensor.location), home, label)
        if location is not None:
            tensor = _relocated(model, tensor, home, location, label)
            relocated[tensor.name] = location
            folder = home
        if used is not None and folder != used:
            raise ModelImportError(
                f"{label}: resolved in {folder}, while another tensor's data is in {used}; pass "
                "external_data_dir to name the one folder that holds the model's external data"
            )
        used = folder
        _check_tensor(tensor, folder, label)
    return used, relocated


def _linked_home(model_file: Path | None) -> Path | None:
    """The ``blobs/`` folder of a Hugging Face hub cache the model file links into, else None.

    The cache keeps ``<repo>/snapshots/<revision>/model.onnx`` and its ``model.onnx_data`` as
    links into ``<repo>/blobs/``, where onnx refuses to follow them (ONNX Runtime follows). Only
    that layout is accepted: a link from any folder into the folder its model file resolves to
    would let a folder of links read files beside any model the user keeps (a model in the home
    folder, and ~/.netrc as its weights)."""
    if model_file is None or not model_file.is_symlink():
        return None
    try:
        home = model_file.resolve(strict=True).parent
        snapshot = model_file.parent.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if home.name != "blobs" or not snapshot.is_relative_to(home.parent / "snapshots"):
        return None
    return home


def _linked_location(folder: Path, location: str, home: Path | None, label: str) -> str | None:
    """Where in ``home`` the data lies, when ``folder / location`` links out of ``folder`` into it."""
    parts = location.replace("\\", "/").split("/")
    if home is None or not location or os.path.isabs(location) or Path(location).drive or ".." in parts:
        return None  # _check_tensor refuses such a location, link or not
    path = folder / location
    try:
        real, real_folder = path.resolve(strict=True), folder.resolve(strict=True)
    except (OSError, RuntimeError):
        return None  # _check_tensor names the problem
    if real.is_relative_to(real_folder) or not real.is_relative_to(home):
        return None
    return real.relative_to(home).as_posix()


def _relocated(model: ir.Model, tensor: ir.ExternalTensor, home: Path, location: str, label: str) -> ir.ExternalTensor:
    """``tensor`` read from ``home / location``, in its initializer's place."""
    moved = ir.ExternalTensor(location, tensor.offset, tensor.length, tensor.dtype, shape=tensor.shape,
                              name=tensor.name, base_dir=home)
    graphs = [model.graph]
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                graphs.append(attribute.value)
            elif attribute.type == ir.AttributeType.GRAPHS:
                graphs.extend(attribute.value)
    for graph in graphs:
        for value in graph.initializers.values():
            if value.const_value is tensor:
                value.const_value = moved
                return moved
    raise ModelImportError(f"{label}: its data links out of the model's folder; copy the folder with the links "
                           "followed (cp -rL SNAPSHOT_DIR DIR) and convert DIR's model")


def external_tensors(model: ir.Model) -> Iterator[ir.ExternalTensor]:
    """Every ``ExternalTensor`` of the model: initializers and tensor attributes, in every graph
    and subgraph and in the model-local functions."""
    stack: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    while stack:
        graph = stack.pop()
        if isinstance(graph, ir.Graph):
            for value in graph.initializers.values():
                if isinstance(value.const_value, ir.ExternalTensor):
                    yield value.const_value
        for node in graph:
            for attribute in node.attributes.values():
                if attribute.type == ir.AttributeType.TENSOR:
                    tensors = [attribute.value]
                elif attribute.type == ir.AttributeType.TENSORS:
                    tensors = list(attribute.value)
                elif attribute.type == ir.AttributeType.GRAPH:
                    stack.append(attribute.value)
                    continue
                elif attribute.type == ir.AttributeType.GRAPHS:
                    stack.extend(attribute.value)
                    continue
                else:
                    continue
                yield from (t for t in tensors if isinstance(t, ir.ExternalTensor))


def _check_tensor(tensor: ir.ExternalTensor, folder: Path, label: str) -> None:
    path = _resolve(folder, os.fspath(tensor.location), label)
    offset = tensor.offset or 0
    expected = tensor.nbytes
    if offset < 0 or (tensor.length is not None and tensor.length < 0):
        raise ModelImportError(f"{label}: offset {offset} and length {tensor.length} must be >= 0; the model is damaged")
    if tensor.length is not None and tensor.length != expected:
        raise ModelImportError(
            f"{label}: length {tensor.length} bytes, but dims {list(tensor.shape)} of {tensor.dtype.name} "
            f"need {expected}; the model is damaged"
        )
    size = path.stat().st_size
    if offset + expected > size:
        raise ModelImportError(
            f"{label}: bytes [{offset}, {offset + expected}) lie beyond the end of {path} ({size} bytes); "
            "the data file is truncated or belongs to another model"
        )
    tensor.base_dir = folder
    try:
        tensor.numpy()  # maps the file (no copy); onnx_ir checks containment again as it opens it
    except (OSError, ValueError) as err:
        raise ModelImportError(f"{label}: cannot read {path}: {err}") from err


def _resolve(folder: Path, location: str, label: str) -> Path:
    """``folder / location`` if it names a regular file inside ``folder`` (symlinks resolved)."""
    found = contained_file(folder, location)
    if found.problem:
        raise ModelImportError(f"{label}: " + _REFUSALS[found.problem].format(path=found.path, real=found.real,
                                                                            detail=found.detail))
    return found.real


_REFUSALS = {
    "location": "the location must be a relative path inside the model's folder, without '..'; the model is "
                "damaged or hostile",
    "missing": "{path} does not exist; keep the model's data files next to it",
    "unresolved": "cannot resolve {path} ({detail})",
    "outside": "{path} resolves to {real}, outside the model's folder {detail}; external data must stay inside the "
               "model's folder (or, in a Hugging Face hub cache, in the blobs/ folder its snapshot links into); copy "
               "the model's folder with the links followed (cp -rL MODEL_DIR DIR) and convert DIR's model",
    "special": "{path} is not a regular file (a folder, pipe or device)",
}
