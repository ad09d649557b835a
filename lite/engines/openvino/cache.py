"""On-disk forms of a model for OpenVINO: the lowered ONNX file and the compiled blobs.

Layout under the runtime's cache root (:func:`lite.engines.default_cache_dir`)::

    <cache_dir>/openvino/models/<key>/model.onnx    the lowered graph, weights referenced externally
    <cache_dir>/openvino/models/<key>/weights.bin   its float weights, 64-byte aligned
    <cache_dir>/openvino/compiled/<cpu>/            OpenVINO's CACHE_DIR (compiled blobs)

``<key>`` covers the weights' identity (path, size, mtime, inode of the .lite file; or a hash of
the arrays for models loaded from bytes), the source of the lowering code and the OpenVINO
version. OpenVINO keys a blob compiled from a path on the path and the compile settings, so a
model file is never rewritten in place: a new key is a new folder, written to a staging folder
and renamed into place whole. ``<cpu>`` separates machines that share a home folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lite.cpu import signature as cpu_signature
from lite.format import ir
from lite.format.onnx.graph import lowering_fingerprint

_ALIGNMENT = 64


@dataclass(frozen=True)
class Entry:
    path: Path  # model.onnx
    existed: bool  # found in the cache (no lowering was needed)


def lower_for_openvino(model: ir.Model, *, external_weights: bool = True):
    from lite.format.onnx.lower import lower_model

    return lower_model(model, external_weights=external_weights)


def read_in_memory(core: Any, model: ir.Model):
    """An ``openvino.Model`` from the lowered graph with its weights inside (no cache)."""
    lowered = lower_for_openvino(model, external_weights=False)
    return core.read_model(lowered.model.SerializeToString())


def model_entry(model: ir.Model, cache_dir: Path, weights_identity: str | None, version: str) -> Entry:
    """The cached ``model.onnx`` for ``model``, written first when missing."""
    lowered = None
    if weights_identity is None:
        lowered = lower_for_openvino(model)
        identity = _hash_lowered(lowered)
    else:
        identity = weights_identity
    # A change to the lowering (or to this file's layout) must not reuse an old model.onnx.
    sources = lowering_fingerprint(Path(__file__).resolve())
    key = hashlib.sha256(repr((identity, sources, version)).encode()).hexdigest()[:32]
    folder = cache_dir / "openvino" / "models" / key
    path = folder / "model.onnx"
    if path.exists() and (folder / "weights.bin").exists():
        return Entry(path, existed=True)
    lowered = lowered or lower_for_openvino(model)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=folder.parent))
    try:
        _write(lowered, staging)
        os.replace(staging, folder)  # atomic: a concurrent loader sees no folder or a whole one
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process finished first
        if not path.exists():
            raise
    return Entry(path, existed=False)


def compiled_dir(cache_dir: Path, version: str) -> Path:
    folder = cache_dir / "openvino" / "compiled" / hashlib.sha256(repr((version, cpu_signature())).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _write(lowered: Any, folder: Path) -> None:
    """``model.onnx`` with every external initializer pointing into ``weights.bin``."""
    from onnx import TensorProto

    offsets: dict[str, tuple[int, int]] = {}
    with open(folder / "weights.bin", "wb") as handle:
        position = 0
        for name, array in lowered.external.items():
            padding = -position % _ALIGNMENT
            handle.write(b"\0" * padding)
            position += padding
            data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
            handle.write(data)
            offsets[name] = (position, data.nbytes)
            position += data.nbytes
    for initializer in lowered.model.graph.initializer:
        if initializer.data_location != TensorProto.EXTERNAL or initializer.name not in offsets:
            continue
        offset, length = offsets[initializer.name]
        del initializer.external_data[:]
        for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length))):
            entry = initializer.external_data.add()
            entry.key, entry.value = key, value
    with open(folder / "model.onnx", "wb") as handle:
        handle.write(lowered.model.SerializeToString())


def _hash_lowered(lowered: Any) -> str:
    digest = hashlib.sha256(lowered.model.SerializeToString())
    for name in sorted(lowered.external):
        digest.update(name.encode())
        digest.update(memoryview(np.ascontiguousarray(lowered.external[name]).reshape(-1).view(np.uint8)))
    return "sha256:" + digest.hexdigest()
