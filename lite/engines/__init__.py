"""Engines: the table of engines ``lite.Model.load(engine=...)`` and autotuning can build.

Each entry names a factory ``"module:function"``, imported only when that engine is built, so
importing ``lite`` imports no optional package. A factory is called as
``factory(model: ir.Model, request: EngineRequest)`` and returns an object with ``.name`` and
``.run(feeds: dict) -> dict``; it raises :class:`lite.EngineUnavailableError` when its package or
device is missing here and an :class:`lite.UnsupportedOpError` when it cannot run the model.

Adding an engine is one line in ``ENGINES``, e.g.::

    "torch": EngineEntry("lite.engines.torch:create_engine", ("torch",), ("cuda",)),
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# Engine-wide facts live in lite.engines.base (engines import them from there, not from this
# package, which imports the engines): re-exported here for callers.
from lite.engines.base import default_cache_dir as default_cache_dir
from lite.engines.base import default_precision
from lite.engines.base import has_half_weights as has_half_weights
from lite.format import ir

# Precision policies, most exact first: the least precise arithmetic an engine may use
# ("bf16" allows fp16 too; "fp16" does not allow bf16, which keeps fewer mantissa bits).
PRECISIONS = ("exact", "fp16", "bf16")


@dataclass(frozen=True)
class EngineEntry:
    factory: str  # "module:function", imported on first use
    packages: tuple[str, ...]  # distributions whose versions key caches and tuning decisions
    devices: tuple[str, ...]  # devices engine="auto" measures it on, best first


@dataclass(frozen=True)
class EngineRequest:
    """What the caller asked for; a factory reads what applies to it and rejects unknown options."""

    device: str = "auto"  # "auto" or a device the engine runs on ("cpu", "cuda", ...)
    threads: int | None = None
    precision: str | None = None  # a policy of PRECISIONS; None: default_precision (create_engine fills it in)
    custom_ops: Any = None
    identity: str | None = None  # identity of the model file (path, size, mtime, inode); None: bytes
    cache_dir: Path | None = None  # the cache root; None: no on-disk caches
    options: dict[str, Any] = field(default_factory=dict)  # engine-specific options


ENGINES: dict[str, EngineEntry] = {
    "numpy": EngineEntry("lite.engines:create_numpy_engine", ("numpy",), ("cpu",)),
    "onnxruntime": EngineEntry("lite.engines:create_onnxruntime_engine", ("onnxruntime", "onnxruntime-gpu"),
                               ("cuda", "cpu")),
    "openvino": EngineEntry("lite.engines.openvino:create_engine", ("openvino",), ("cpu",)),
    "torch": EngineEntry("lite.engines.torch:create_engine", ("torch",), ("cuda",)),
}


def create_engine(name: str, model: ir.Model, request: EngineRequest) -> Any:
    """Build engine ``name`` of :data:`ENGINES` for ``model``."""
    if name not in ENGINES:
        raise ValueError(f"engine must be 'auto' or one of {', '.join(ENGINES)}; got {name!r}")
    if request.precision is None:
        request = dataclasses.replace(request, precision=default_precision(model))
    elif request.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {request.precision!r}")
    module_name, _, function = ENGINES[name].factory.partition(":")
    factory = getattr(importlib.import_module(module_name), function)
    return factory(model, request)


def engine_versions() -> dict[str, str | None]:
    """Installed versions of every engine's packages (None: not installed), without importing them."""
    versions: dict[str, str | None] = {}
    for entry in ENGINES.values():
        for package in entry.packages:
            try:
                versions[package] = metadata.version(package)
            except metadata.PackageNotFoundError:
                versions[package] = None
    return versions


def create_numpy_engine(model: ir.Model, request: EngineRequest) -> Any:
    """The numpy engine: always available, computes in the stored precision (exact)."""
    if request.device not in ("auto", "cpu", "numpy"):
        raise ValueError(f"engine 'numpy' runs on the CPU; got device={request.device!r}")
    options = {k: v for k, v in request.options.items() if k != "cache_dir"}
    if options:
        raise TypeError(f"options {', '.join(sorted(options))} do not apply to engine 'numpy'")
    from lite.engines.numpy_engine import NumpyEngine

    return NumpyEngine(model, request.custom_ops)


# ONNX Runtime's precision setting for each policy: its CPU provider computes bf16 policies in
# float32 (more exact than asked); on GPUs "auto" computes in fp16 when the weights are fp16.
_ORT_PRECISION = {"exact": "fp32", "bf16": "auto", "fp16": "fp16"}


def create_onnxruntime_engine(model: ir.Model, request: EngineRequest) -> Any:
    """ONNX Runtime on ``request.device`` ("auto": CUDA when its provider is offered, else the CPU)."""
    from lite.engines.ort.engine import OrtEngine, available_devices
    from lite.engines.ort.sessions import SessionConfig

    device = request.device
    if device == "auto":
        offered = [d for d in available_devices() if d != "tensorrt"]
        device = offered[0] if offered else "cpu"
    options = dict(request.options)
    options.setdefault("cache_dir", request.cache_dir)
    if request.precision is not None and "precision" not in options:  # else ONNX Runtime's own setting, as given
        wanted = _ORT_PRECISION[request.precision]
        options["precision"] = "fp32" if device == "cpu" and wanted == "fp16" else wanted
    try:
        config = SessionConfig(device=device, threads=request.threads, weights_identity=request.identity, **options)
    except TypeError as err:
        names = ", ".join(f for f in SessionConfig.__dataclass_fields__ if f not in ("device", "threads", "weights_identity"))
        raise TypeError(f"unknown engine option ({err}); valid options: {names}") from None
    return OrtEngine(model, device, custom_ops=request.custom_ops, options=config)
