"""Engine autotuning: measure the engines that can run a model, keep the fastest per batch size.

``lite.Model.load(path, engine="auto", batch_sizes=(1, 8), precision="exact")`` calls :func:`tune`:

1. Candidates are the (engine, device) pairs of :data:`lite.engines.ENGINES` for the requested
   device; one that cannot be built here (package missing, no GPU, an op it cannot run) is
   recorded with the reason and left out.
2. For each declared batch size (a *bucket*), every candidate runs the model's own random
   inputs and must agree with the numpy engine within the policy's tolerance
   (:data:`TOLERANCES`); one that disagrees is recorded with its error and left out.
3. The agreeing candidates are timed in alternating rounds (each warmed up again after the
   switch, since one engine's spinning threads slow the next one for a few calls, and the order
   rotated); each is scored by its time relative to the fastest of the same round, median over
   rounds (a paired comparison: candidates of one round see about the same load from other
   processes); candidates within 10% of the best get more rounds between them; the lowest
   score wins. Times, medians and spreads are recorded too. A candidate more than :data:`lite.engine_timing.GIVE_UP` times slower than the
   best after the first round is not timed again.
4. The decision is written as JSON to ``<cache_dir>/autotune/<key>.json``. The file name covers
   the model path, device, threads, policy and buckets; inside, the model file's identity (size,
   mtime, inode), the engines' package versions and a hardware fingerprint are recorded, and a
   later load reuses the decision only when all three still match (otherwise it measures again
   and rewrites the file).

At run time :class:`AutoEngine` sends a batch of size ``b`` to the engine of the smallest bucket
``>= b`` (the largest bucket beyond them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lite.atomic import atomic_write
from lite.compare import QUANTIZED_TOLERANCE, TOLERANCES, agreement  # noqa: F401 - part of this module's API
from lite.device_arrays import device_array_spec, is_device_array
from lite.engine_timing import Timing, time_alternating
from lite.engines import ENGINES, PRECISIONS, EngineRequest, create_engine, default_precision, engine_versions
from lite.errors import InvalidInputError, LiteError, SampleInputError, UnsupportedOpError
from lite.format import ir
from lite.format.dtypes import DataType
from lite.sample_inputs import command_line_hint, runnable_feeds
from lite.signature import file_identity
from lite.version import __version__

DECISION_FORMAT = 1


DEFAULT_TIMING = Timing()


def _is_quantized(model: ir.Model) -> bool:
    return any(node.op_type in ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul")
               for graph in model.graphs for node in graph.nodes)


def hardware_fingerprint() -> dict[str, Any]:
    """The CPU (model, flags, usable cores) and NVIDIA GPUs, read without importing any engine."""
    from lite.cpu import signature as cpu_signature

    gpus = []
    root = Path("/proc/driver/nvidia/gpus")
    if root.is_dir():
        for information in sorted(root.glob("*/information")):
            try:
                line = next((ln for ln in information.read_text().splitlines() if ln.startswith("Model:")), "")
            except OSError:
                continue
            gpus.append(line.partition(":")[2].strip())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_signature(), "cores": cores, "gpus": gpus, "system": platform.system()}


def candidates(device: str) -> list[tuple[str, str]]:
    """(engine, device) pairs engine="auto" measures for ``device``."""
    pairs = []
    for name, entry in ENGINES.items():
        for engine_device in entry.devices:
            if device in ("auto", engine_device) or (device == "numpy" and name == "numpy"):
                pairs.append((name, engine_device))
    return pairs


def _label(engine: str, device: str) -> str:
    return engine if engine == "numpy" else f"{engine}:{device}"


def _batch_of(feeds: Mapping[str, Any]) -> int | None:
    for value in feeds.values():
        shape = device_array_spec(value)[0] if is_device_array(value) else getattr(value, "shape", None)
        if shape:
            return int(shape[0])
    return None


class AutoEngine:
    """The engines autotuning chose, one per batch-size bucket; ``decision`` is the record."""

    def __init__(self, buckets: list[tuple[int | None, Any]], decision: dict[str, Any]) -> None:
        self.buckets = sorted(buckets, key=lambda item: -1 if item[0] is None else item[0])
        self.decision = decision
        names = []
        for _, engine in self.buckets:
            if engine.name not in names:
                names.append(engine.name)
        self.name = "|".join(names)
        self.kind = "auto"
        placements = {engine.placement for _, engine in self.buckets}
        self.placement = placements.pop() if len(placements) == 1 else "mixed"
        self.on_gpu = any(engine.on_gpu for _, engine in self.buckets)
        self._single = self.buckets[0][1] if len(names) == 1 else None

    def engine_for(self, batch: int | None) -> Any:
        if batch is None or self.buckets[0][0] is None:
            return self.buckets[0][1]
        for size, engine in self.buckets:
            if batch <= size:
                return engine
        return self.buckets[-1][1]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        engine = self._single or self.engine_for(_batch_of(feeds))
        return engine.run(feeds)

    def describe(self) -> dict[str, Any]:
        return {"engine": "auto", "buckets": [{"batch": size, "engine": engine.name} for size, engine in self.buckets],
                "decision": self.decision}


def tune(model: ir.Model, *, identity: str, device: str = "auto", threads: int | None = None,
         precision: str | None = None, batch_sizes: Sequence[int] | None = None, custom_ops: Any = None,
         cache_dir: str | os.PathLike | None = None, retune: bool = False, timing: Timing | None = None,
         engines: Sequence[str] | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None) -> AutoEngine:
    """Measure (or reuse the recorded decision) and return an :class:`AutoEngine`.

    ``identity`` names the model for the decision file (``lite.signature.file_identity`` for a
    file, a content hash for bytes); ``cache_dir`` None measures every time and records nothing;
    ``engines`` limits the candidates to these engine names; ``input_shapes`` (input name ->
    shape, its leading size replaced by each batch size) sizes the random inputs measured on,
    where the file records no sizes the model runs on. Raises :class:`SampleInputError` when
    random inputs do not run the model (``Model.load`` then binds its default engine).
    """
    policy = precision or default_precision(model)
    if policy not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    buckets = _buckets(model, batch_sizes)
    pairs = [p for p in candidates(device) if engines is None or p[0] in engines]
    if not pairs:
        raise ValueError(f"no engine of {', '.join(engines or ENGINES)} runs on device {device!r}")
    fingerprint = {"format": DECISION_FORMAT, "model": identity, "lite": __version__,
                   "versions": engine_versions(), "hardware": hardware_fingerprint()}
    settings = {"device": device, "threads": threads, "precision": policy, "batch_sizes": buckets,
                "engines": [_label(*p) for p in pairs]}
    shapes = {name: tuple(int(size) for size in shape) for name, shape in (input_shapes or {}).items()}
    names = [model.main.tensors[index].name for index in model.main.inputs]
    unknown = [name for name in shapes if name not in names]
    if unknown:
        raise InvalidInputError(f"input_shapes names {', '.join(map(repr, unknown))}: the model has no such input; "
                                f"its inputs: {', '.join(names)}")
    if shapes:
        settings["input_shapes"] = {name: list(shape) for name, shape in shapes.items()}
    cache_root = Path(cache_dir) if cache_dir is not None else None
    path = _decision_path(cache_root, identity, settings) if cache_root is not None else None
    request = EngineRequest(device=device, threads=threads, precision=policy, custom_ops=custom_ops,
                            identity=None if identity.startswith("sha256:") else identity, cache_dir=cache_root)
    if path is not None and not retune:
        reused = _reuse(model, path, fingerprint, settings, request)
        if reused is not None:
            return reused
    decision = _measure(model, pairs, buckets, request, timing or DEFAULT_TIMING, shapes)
    decision.update(fingerprint=fingerprint, settings=settings, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    built = decision.pop("_engines")
    if path is not None:
        _save(decision, path)
    decision["reused"] = False
    return AutoEngine([(b["batch"], built[b["chosen"]]) for b in decision["buckets"]], decision)


def _save(decision: dict[str, Any], path: Path) -> None:
    """Record ``decision`` at ``path`` for later loads. A cache that cannot be written (no HOME,
    a read-only root on an edge device) costs only the reuse: the measured decision still binds,
    with a warning, where it used to fail the load after measuring."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            handle.write(json.dumps(decision, indent=2, sort_keys=True).encode())
    except OSError as err:
        decision["not_saved"] = f"{path}: {err.strerror or err}"
        warnings.warn(f"engine='auto': the decision was measured but cannot be saved under {path.parent} "
                      f"({err.strerror or err}); the next load measures again (pass cache_dir= a writable folder)",
                      RuntimeWarning, stacklevel=4)
        return
    decision["path"] = str(path)


def model_identity(source: Any) -> str:
    """The identity decisions are keyed on: the file's (path, size, mtime, inode), or a content hash."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "sha256:" + hashlib.sha256(source).hexdigest()
    return file_identity(source)


def _buckets(model: ir.Model, batch_sizes: Sequence[int] | None) -> list[int | None]:
    """Sorted distinct batch sizes; [None] when no input has a free leading dimension."""
    graph = model.main
    shapes = [graph.tensors[i].shape for i in graph.inputs]
    if not any(shape and not isinstance(shape[0], int) for shape in shapes):
        return [None]
    sizes = sorted(set(batch_sizes or (1,)))
    if any(not isinstance(size, int) or size < 1 for size in sizes):
        raise ValueError(f"batch_sizes must be positive integers; got {list(batch_sizes or ())}")
    return list(sizes)


def _decision_path(cache_dir: Path, identity: str, settings: dict[str, Any]) -> Path:
    # The path part of the identity only: a rewritten model file keeps its decision file.
    where = identity.rsplit(":", 3)[0] if not identity.startswith("sha256:") else identity
    key = hashlib.sha256(json.dumps([where, settings], sort_keys=True).encode()).hexdigest()[:32]
    return cache_dir / "autotune" / f"{key}.json"


def _reuse(model: ir.Model, path: Path, fingerprint: dict[str, Any], settings: dict[str, Any],
           request: EngineRequest) -> AutoEngine | None:
    try:
        decision = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if decision.get("fingerprint") != fingerprint or decision.get("settings") != settings:
        return None  # the model, an engine version or the hardware changed: measure again
    built: dict[str, Any] = {}
    try:
        for bucket in decision["buckets"]:
            label = bucket["chosen"]
            if label not in built:
                engine, _, device = label.partition(":")
                built[label] = create_engine(engine, model, _on(request, device or "cpu"))
        buckets = [(bucket["batch"], built[bucket["chosen"]]) for bucket in decision["buckets"]]
    except (LiteError, KeyError, TypeError, ValueError):
        return None
    decision.update(path=str(path), reused=True)
    return AutoEngine(buckets, decision)


def _on(request: EngineRequest, device: str) -> EngineRequest:
    return dataclasses.replace(request, device=device)


def _measure(model: ir.Model, pairs: list[tuple[str, str]], buckets: list[int | None], request: EngineRequest,
             timing: Timing, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    built: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    build_seconds: dict[str, float] = {}
    for engine, device in pairs:
        label = _label(engine, device)
        started = time.perf_counter()
        try:
            built[label] = create_engine(engine, model, _on(request, device))
        except (LiteError, ImportError) as err:
            unavailable[label] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            continue
        build_seconds[label] = round(time.perf_counter() - started, 3)
    reference = built.get("numpy")
    if reference is None:
        from lite.engines.numpy_engine import NumpyEngine

        try:
            reference = NumpyEngine(model, request.custom_ops)
        except LiteError as err:
            reference, unavailable["reference"] = None, f"the numpy engine cannot run this model: {err}"
    tolerance = QUANTIZED_TOLERANCE if _is_quantized(model) else TOLERANCES[request.precision or "exact"]
    results = []
    for batch in buckets:
        results.append(_measure_bucket(model, batch, built, reference, tolerance, timing, shapes))
    used = {bucket["chosen"] for bucket in results}
    return {"buckets": results, "unavailable": unavailable, "tolerance": tolerance, "build_seconds": build_seconds,
            "_engines": {label: engine for label, engine in built.items() if label in used}}


def _measure_bucket(model: ir.Model, batch: int | None, built: dict[str, Any], reference: Any,
                    tolerance: float, timing: Timing, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    try:
        feeds, expected = _tuning_feeds(model, batch or 1, built, reference, shapes)
    except SampleInputError:
        raise
    except InvalidInputError as err:
        # Nothing to measure with (strings, untyped inputs): the numpy engine runs every model.
        if "numpy" not in built:
            raise
        return {"batch": batch, "chosen": "numpy", "candidates": {},
                "note": f"not measured: {err}; the numpy engine runs every model"}
    entries: dict[str, dict[str, Any]] = {}
    agreeing = []
    for label, engine in built.items():
        entry = entries[label] = {}
        try:
            outputs = engine.run(feeds)
        except LiteError as err:
            entry["rejected"] = f"failed on the tuning inputs: {type(err).__name__}: {str(err)[:300]}"
            continue
        if expected is not None:
            error, reason = agreement(expected, outputs, tolerance)
            entry["error"] = error
            if reason is not None:
                entry["rejected"] = reason
                continue
        else:
            entry["note"] = "agreement not checked: the numpy engine cannot run this model"
        agreeing.append(label)
    scores = time_alternating({label: built[label] for label in agreeing}, feeds, timing, entries)
    if not scores:
        raise UnsupportedOpError(
            f"no engine runs this model within tolerance at batch {batch}: "
            + "; ".join(f"{label}: {entry.get('rejected')}" for label, entry in entries.items())
        )
    chosen = min(scores, key=lambda label: (scores[label], entries[label]["ms"]["best_round"]))
    for label, score in scores.items():
        if label != chosen:
            entries[label].setdefault("rejected", f"slower: {score / scores[chosen]:.2f}x the time of {chosen} "
                                                  f"in the same rounds (median {entries[label]['ms']['median']:.3f} ms "
                                                  f"vs {entries[chosen]['ms']['median']:.3f} ms)")
    return {"batch": batch, "chosen": chosen, "candidates": entries}


def _tuning_feeds(model: ir.Model, batch: int, built: dict[str, Any], reference: Any,
                  shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, np.ndarray], Any]:
    """Random inputs the reference runs (:func:`lite.sample_inputs.runnable_feeds`) and its
    outputs on them (None without a reference: another engine tried them)."""
    graph = model.main
    for index in graph.inputs:
        if graph.tensors[index].dtype in (DataType.UNDEFINED, DataType.STRING):
            raise InvalidInputError(f"input {graph.tensors[index].name!r} is untyped or holds strings: "
                                    "no random inputs for it")
    runner = reference if reference is not None else next(iter(built.values()), None)
    feeds, outputs = runnable_feeds(model, batch, runner.run if runner is not None else _nothing,
                                    _at_batch(model, shapes, batch), seed=0, hint=_shape_hint)
    return feeds, outputs if reference is not None else None


def _nothing(feeds: dict[str, np.ndarray]) -> None:
    """No engine to try inputs on: the first ones stand (the bucket then finds nothing to choose)."""


def _at_batch(model: ir.Model, shapes: dict[str, tuple[int, ...]], batch: int) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` with each symbolic leading size set to the bucket's ``batch``."""
    tensors = {model.main.tensors[index].name: model.main.tensors[index] for index in model.main.inputs}
    resized = {}
    for name, shape in shapes.items():
        declared = tensors[name].shape if name in tensors else None
        if shape and declared and not isinstance(declared[0], int):
            shape = (batch, *shape[1:])
        resized[name] = shape
    return resized


def _shape_hint(names: list[str]) -> str:
    shapes = ", ".join(f"{name!r}: (D1, D2, ...)" for name in names)
    return f"Model.load(..., engine='auto', input_shapes={{{shapes}}}) or lite bench --autotune {command_line_hint(names)}"
