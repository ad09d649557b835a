"""Per-model configuration: ``<repository>/<model>/config.json`` (optional).

Every key is optional; unknown keys are an error so that a typo never goes unnoticed::

    {
      "max_batch_size": 8,                      # > 0: the first dimension is the batch
      "dynamic_batching": {                     # merge requests (needs max_batch_size > 0)
        "max_queue_delay_us": 500,
        "preferred_batch_sizes": [4, 8],
        "pad_batches": true                     # pad each batch to a fixed size (default: on a GPU)
      },
      "max_queue_size": 256,                    # queued requests before RESOURCE_EXHAUSTED
      "instance_count": 2,                      # executions of this model in parallel
      "threads": 1,                             # intra-op threads (ONNX Runtime); 0: one per core
      "device": "cpu",                          # numpy | cpu | cuda | auto (default: the server's)
      "engine": "auto",                         # auto | numpy | onnxruntime | openvino | torch
      "precision": "exact",                     # with "engine": exact | fp16 | bf16
      "engine_options": {"mode": "reduce-overhead"},  # with a named engine: its lite.Model.load options
      "version_policy": {"latest": 2},          # or {"all": true} or {"specific": [1, 3]}
      "warmup": {"batch_size": 1, "count": 2},  # runs on zero inputs before the model is READY
      "inputs": {"x": "INPUT0"},                # rename: model tensor name -> served name
      "outputs": {"logits": "OUTPUT0"},
      "preprocessing": "image"                  # serve the image input as encoded PNG/JPEG bytes
    }

The meaning follows Triton's model configuration (``model_config.proto``) where one exists.
``engine`` binds one of lite's engines (``lite.Model.load(engine=...)``); ``"auto"`` measures the
engines that can run the model at the batch sizes this server runs it at (1, the preferred batch
sizes and ``max_batch_size``) and binds the fastest per batch size: the same decision, recorded
in the same cache, as ``lite bench --autotune`` and ``lite.Model.load(engine="auto")`` make.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lite.engines import ENGINES
from lite.engines.base import DEVICES

from .engine_options import EngineOptionPolicy, check_engine_options
from .errors import ConfigError

CONFIG_FILE = "config.json"

_KEYS = {
    "max_batch_size", "dynamic_batching", "max_queue_size", "instance_count", "threads", "device",
    "version_policy", "warmup", "inputs", "outputs", "preprocessing", "engine", "precision", "engine_options",
}
ENGINE_NAMES = ("auto", *ENGINES)
PRECISIONS = ("exact", "fp16", "bf16")


@dataclass(frozen=True)
class DynamicBatching:
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    # Pad each merged batch up to the smallest of ModelConfig.padded_batch_sizes() not below it
    # (repeating its last row; the extra rows' outputs are dropped), so the engine only ever
    # sees those shapes: CUDA graphs and compiled kernels are made once per shape, and cuDNN
    # tunes its algorithms once per shape. None: on when the model runs on a GPU.
    pad_batches: bool | None = None


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions to serve: the newest ``latest`` ones, ``all``, or ``specific`` ones."""

    latest: int = 1
    all: bool = False
    specific: tuple[int, ...] = ()

    def select(self, available: list[int]) -> list[int]:
        ordered = sorted(available)
        if self.all:
            return ordered
        if self.specific:
            return [v for v in ordered if v in self.specific]
        return ordered[-self.latest :]


@dataclass(frozen=True)
class Warmup:
    batch_size: int = 1
    count: int = 1


@dataclass(frozen=True)
class ModelConfig:
    max_batch_size: int = 0
    dynamic_batching: DynamicBatching | None = None
    max_queue_size: int | None = None  # None: the server's default
    instance_count: int | None = None
    threads: int | None = None  # None: the server's setting
    device: str | None = None
    version_policy: VersionPolicy = VersionPolicy()
    warmup: Warmup | None = None
    input_names: dict[str, str] = field(default_factory=dict)  # model name -> served name
    output_names: dict[str, str] = field(default_factory=dict)
    preprocessing: str = ""  # "" | "image"
    engine: str | None = None  # None: the engine ``device`` names
    precision: str | None = None  # with ``engine``: the precision policy (None: "exact")
    # with a named ``engine``: its keyword options for lite.Model.load (JSON values), checked by
    # the engine when the model loads
    engine_options: dict[str, Any] = field(default_factory=dict)

    def batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes this model is run at: what ``engine: auto`` tunes for."""
        if self.max_batch_size <= 0:
            return (1,)
        preferred = self.dynamic_batching.preferred_batch_sizes if self.dynamic_batching else ()
        return tuple(sorted({1, *preferred, self.max_batch_size}))

    def padded_batch_sizes(self) -> tuple[int, ...]:
        """The sizes ``pad_batches`` pads up to: 1, the preferred sizes and ``max_batch_size``;
        without preferred sizes, the powers of two up to ``max_batch_size`` and itself (so no batch
        is padded to more than twice its rows)."""
        preferred = self.dynamic_batching.preferred_batch_sizes if self.dynamic_batching else ()
        if preferred or self.max_batch_size <= 0:
            return self.batch_sizes()
        powers = {1 << k for k in range(self.max_batch_size.bit_length()) if 1 << k <= self.max_batch_size}
        return tuple(sorted({*powers, self.max_batch_size}))


MAX_CONFIG_BYTES = 1 << 20
_MAX_INT = 2**31 - 1  # every integer setting; Python's int() would take any number of digits
# Warm-up runs on zero inputs before a model is READY: bounded, so a typo cannot exhaust memory
# or hold the model back for hours.
_MAX_WARMUP_BATCH = 4096
_MAX_WARMUP_COUNT = 1000


def read_config(model_dir: Path, policy: EngineOptionPolicy = EngineOptionPolicy()) -> ModelConfig:
    """The model's config file, or defaults when it has none; ``policy``: the engine options the
    server's operator allows it (serving.engine_options)."""
    path = model_dir / CONFIG_FILE
    if not os.path.lexists(path):
        return ModelConfig()
    if path.resolve().parent != model_dir.resolve():
        # Read nothing through it: its errors would show another file's content.
        raise ConfigError(f"{path}: a link to a file outside the model's folder; copy the file instead")
    text = _read_regular_file(path)
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; a model config is a few lines of JSON")
    try:
        raw = json.loads(text.decode("utf-8"))
    except RecursionError as err:
        raise ConfigError(f"{path}: JSON nested too deeply to be a model config") from err
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError, and integers of thousands of digits
        raise ConfigError(f"{path}: not readable JSON ({str(err)[:200]})") from err
    return parse_config(raw, str(path), policy)


def _read_regular_file(path: Path) -> bytes:
    """Up to MAX_CONFIG_BYTES + 1 bytes of ``path``, which must be a regular file: a directory, a
    FIFO (whose open would wait for a writer) or a socket named config.json is an error, never a
    model served with default settings. Opened without blocking, and checked on the open file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from err
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ConfigError(f"{path}: not a regular file; make {CONFIG_FILE} a JSON file, or remove it")
    with os.fdopen(descriptor, "rb") as handle:
        try:
            return handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as err:
            raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from err


def parse_config(raw: Any, where: str, policy: EngineOptionPolicy = EngineOptionPolicy()) -> ModelConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(_KEYS)}")
    max_batch_size = _int(raw, "max_batch_size", where, 0, minimum=0)
    batching = None
    if "dynamic_batching" in raw:
        batching = _dynamic_batching(raw["dynamic_batching"], f"{where}: dynamic_batching")
        if max_batch_size == 0:
            raise ConfigError(f"{where}: dynamic_batching needs max_batch_size > 0")
        too_big = [b for b in batching.preferred_batch_sizes if b > max_batch_size]
        if too_big:
            raise ConfigError(f"{where}: preferred_batch_sizes {too_big} exceed max_batch_size {max_batch_size}")
    device = raw.get("device")
    if device is not None and device not in DEVICES:
        raise ConfigError(f"{where}: device {str(device)[:40]!r}; expected one of {', '.join(DEVICES)}")
    engine = raw.get("engine")
    if engine is not None and engine not in ENGINE_NAMES:
        raise ConfigError(f"{where}: engine {engine!r}; expected one of {', '.join(ENGINE_NAMES)}")
    precision = raw.get("precision")
    if precision is not None:
        if precision not in PRECISIONS:
            raise ConfigError(f"{where}: precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        if engine is None:
            raise ConfigError(f"{where}: precision needs an engine (e.g. \"engine\": \"auto\")")
    engine_options = raw.get("engine_options", {})
    if not isinstance(engine_options, dict):
        raise ConfigError(f"{where}: engine_options must be an object of option names and values, "
                          f"e.g. {{\"aot\": true}}; got {engine_options!r}")
    if engine_options and engine in (None, "auto"):
        raise ConfigError(f"{where}: engine_options apply to one engine; name it (e.g. \"engine\": \"torch\")"
                          + (" instead of \"auto\", which measures several" if engine == "auto" else ""))
    reserved = sorted(set(engine_options) & {"engine", "device", "threads", "precision", "batch_sizes"})
    if reserved:
        raise ConfigError(f"{where}: engine_options {reserved} are keys of the config itself; set them there")
    if engine_options:
        check_engine_options(engine, engine_options, policy, where)
    preprocessing = raw.get("preprocessing", "")
    if preprocessing not in ("", "image"):
        raise ConfigError(f"{where}: preprocessing {preprocessing!r}; expected \"image\"")
    return ModelConfig(
        max_batch_size=max_batch_size,
        dynamic_batching=batching,
        max_queue_size=_int(raw, "max_queue_size", where, None, minimum=1),
        instance_count=_int(raw, "instance_count", where, None, minimum=1),
        threads=_int(raw, "threads", where, None, minimum=0),
        device=device,
        version_policy=_version_policy(raw.get("version_policy"), f"{where}: version_policy"),
        warmup=_warmup(raw.get("warmup"), max_batch_size, f"{where}: warmup"),
        input_names=_renames(raw.get("inputs", {}), f"{where}: inputs"),
        output_names=_renames(raw.get("outputs", {}), f"{where}: outputs"),
        preprocessing=preprocessing,
        engine=engine,
        precision=precision,
        engine_options=dict(engine_options),
    )


def _int(raw: dict, key: str, where: str, default: int | None, minimum: int,
         maximum: int = _MAX_INT) -> int | None:
    if key not in raw:
        return default
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10**20 else f"an integer of {len(str(value))} digits"
        raise ConfigError(f"{where}: {key} must be an integer >= {minimum} and <= {maximum}, got {shown}")
    return value


def _dynamic_batching(raw: Any, where: str) -> DynamicBatching:
    if raw is True or raw == {}:
        return DynamicBatching()
    if not isinstance(raw, dict) or set(raw) - {"max_queue_delay_us", "preferred_batch_sizes", "pad_batches"}:
        raise ConfigError(
            f"{where}: expected {{max_queue_delay_us, preferred_batch_sizes, pad_batches}}, got {str(raw)[:200]}"
        )
    sizes = raw.get("preferred_batch_sizes", [])
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s > 0 for s in sizes):
        raise ConfigError(f"{where}: preferred_batch_sizes must be a list of positive integers")
    pad = raw.get("pad_batches")
    if pad is not None and not isinstance(pad, bool):
        raise ConfigError(f"{where}: pad_batches must be true or false, got {pad!r}")
    return DynamicBatching(
        max_queue_delay_us=_int(raw, "max_queue_delay_us", where, 0, minimum=0),
        preferred_batch_sizes=tuple(sorted(set(sizes))),
        pad_batches=pad,
    )


def _version_policy(raw: Any, where: str) -> VersionPolicy:
    if raw is None:
        return VersionPolicy()
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ConfigError(f'{where}: expected one of {{"latest": N}}, {{"all": true}}, {{"specific": [...]}}')
    (kind, value), = raw.items()
    if kind == "latest" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return VersionPolicy(latest=value)
    if kind == "all" and value is True:
        return VersionPolicy(all=True)
    if kind == "specific" and isinstance(value, list) and value and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    ):
        return VersionPolicy(specific=tuple(value))
    raise ConfigError(f"{where}: invalid policy {str(raw)[:200]}")


def _warmup(raw: Any, max_batch_size: int, where: str) -> Warmup | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"batch_size", "count"}:
        raise ConfigError(f"{where}: expected {{batch_size, count}}, got {str(raw)[:200]}")
    size = raw.get("batch_size", 1)
    if max_batch_size > 0 and isinstance(size, int) and size > max_batch_size:
        raise ConfigError(f"{where}: batch_size {size} exceeds the model's max_batch_size {max_batch_size}")
    return Warmup(
        batch_size=_int(raw, "batch_size", where, 1, minimum=1, maximum=_MAX_WARMUP_BATCH),
        count=_int(raw, "count", where, 1, minimum=1, maximum=_MAX_WARMUP_COUNT),
    )


def _renames(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in raw.items()):
        raise ConfigError(f"{where}: expected an object of model name -> served name")
    clashes = _shared_names(raw)
    if clashes:
        served, names = clashes[0]
        raise ConfigError(f"{where}: {names} are all renamed to {served!r}; give each its own served name")
    return dict(raw)


def check_renames(config: ModelConfig, inputs: list[str], outputs: list[str]) -> None:
    """The renamed tensors are the model's, and each served name stands for one tensor.

    A renaming that gives a tensor the served name of another one (``{"outputs": {"y2": "y1"}}``
    on a model whose outputs are y1 and y2) would answer a request for y1 with y2's values, so no
    two inputs, no two outputs, and no input and output may share a served name. (An input that
    the model also returns as an output, under the same name, is one tensor and may keep it.)"""
    unknown = sorted((set(config.input_names) - set(inputs)) | (set(config.output_names) - set(outputs)))
    if unknown:
        raise ConfigError(f"renamed tensor(s) {unknown} are not inputs or outputs of the model")
    served_inputs = {name: config.input_names.get(name, name) for name in inputs}
    served_outputs = {name: config.output_names.get(name, name) for name in outputs}
    for kind, served in (("input", served_inputs), ("output", served_outputs)):
        clashes = _shared_names(served)
        if clashes:
            name, tensors = clashes[0]
            raise ConfigError(
                f"config.json {kind}s: {kind}s {tensors} would all be served as {name!r}, and a request could "
                "not tell them apart; rename them to names no other tensor of the model has"
            )
    for name, served in served_outputs.items():
        for other, other_served in served_inputs.items():
            if served == other_served and name != other:
                raise ConfigError(
                    f"config.json inputs/outputs: output {name!r} and input {other!r} would both be served as "
                    f"{served!r}; rename them to names no other tensor of the model has"
                )


def _shared_names(served: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(served name, the tensors that would have it) for each served name given to several tensors."""
    holders: dict[str, list[str]] = {}
    for tensor, name in served.items():
        holders.setdefault(name, []).append(tensor)
    return [(name, sorted(tensors)) for name, tensors in holders.items() if len(tensors) > 1]
