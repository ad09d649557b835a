"""ONNX Runtime sessions and the on-disk cache of optimized graphs (what a session is built with,
its providers and options: :mod:`lite.engines.ort.session_config`).

ONNX Runtime optimizes a graph every time a session is created (constant folding, fusions,
layout changes: ~0.2 s for a small CNN, seconds for large models). The first session of a model
saves its optimized graph (``model.onnx`` plus its weights in ``weights.bin``) under
``<cache_dir>/ort/<key>/``; later loads open that with optimizations disabled. The key covers
the lowered graph, the weights' identity, the provider and its options, the ONNX Runtime
version and the machine, because an optimized CPU graph may use instructions of this CPU only.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.cpu import signature as cpu_signature
from lite.engines.ort import thread_pools
from lite.engines.ort.session_config import PROVIDERS, SessionConfig, providers, session_options
from lite.errors import EngineUnavailableError, InputValueError, KernelError, UnsupportedOpError

if TYPE_CHECKING:  # lowering imports onnx; a warm start from the cache never needs it
    from lite.format.onnx.lower import Lowered

_MISSING_KERNEL = re.compile(
    r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'"
    r"|Failed to find kernel for (\w+)\(\d+\) \(node:'([^']*)'"
)
_UNKNOWN_OP = re.compile(r"[\w.]*:(\w+)\(-?\d+\) is not a registered function/op")


class MissingKernel(Exception):
    """ONNX Runtime has no kernel for a node (it then runs on the numpy engine)."""

    def __init__(self, message: str, op_type: str, node_name: str | None) -> None:
        super().__init__(message)
        self.op_type = op_type
        self.node_name = node_name


class OrtRejected(UnsupportedOpError):
    """ONNX Runtime refused the lowered model (an op version it does not know, a locale, ...)."""


def _first_line(err: Exception) -> str:
    """The error's first line, its head and tail where long: ONNX Runtime's messages open with a
    source path and a C++ signature and end with the reason ("Unsupported model IR version: 11,
    max supported IR version: 10")."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text if len(text) <= 300 else f"{text[:80]} ... {text[-215:]}"


def import_onnxruntime(device: str):
    try:
        import onnxruntime
    except ImportError as err:
        extra = "gpu" if device in ("cuda", "tensorrt") else "ort"
        raise EngineUnavailableError(
            f"device {device!r} needs ONNX Runtime: pip install 'lite-toolchain[{extra}]'"
        ) from err
    if importlib.util.find_spec("onnx") is None:
        extra = "gpu" if device in ("cuda", "tensorrt") else "ort"
        raise EngineUnavailableError(
            f"device {device!r}: lite's ONNX Runtime engine hands ONNX Runtime the model as ONNX, written with the "
            f"onnx package, which is not installed: pip install 'lite-toolchain[{extra}]' (or pip install onnx)"
        )
    provider = PROVIDERS[device]
    if device != "cpu" and hasattr(onnxruntime, "preload_dlls"):
        # onnxruntime-gpu finds CUDA/cuDNN from the nvidia-* wheels (or torch) only when asked to.
        onnxruntime.preload_dlls()
    available = onnxruntime.get_available_providers()
    if provider not in available:
        hint = {"cuda": "onnxruntime-gpu and a CUDA GPU (pip install 'lite-toolchain[gpu]')",
                "tensorrt": "onnxruntime-gpu built with TensorRT and the TensorRT libraries"}.get(device, "")
        raise EngineUnavailableError(
            f"device {device!r} needs {provider}, which ONNX Runtime {onnxruntime.__version__} here does not offer "
            f"(it offers {', '.join(available)}); install {hint}"
        )
    return onnxruntime


class Session:
    """An InferenceSession plus the arrays it reads in place (kept alive as long as it is)."""

    def __init__(self, session: Any, keep_alive: list[Any], cached: bool) -> None:
        self.session = session
        self.keep_alive = keep_alive
        self.cached = cached
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        # InferenceSession.run checks in Python what its C++ session checks again (input names,
        # OrtValue ownership, WebGPU graph capture): 2 of the 6 microseconds of a call that does
        # nothing, 1% of a small CNN. Numpy feeds go to the C++ session directly where the binding
        # has one (it has been InferenceSession._sess since ONNX Runtime 1.0).
        binding = getattr(session, "_sess", None)
        self._run_arrays = binding.run if callable(getattr(binding, "run", None)) else session.run

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(output_names, feeds)
        except Exception as err:  # ONNX Runtime's run-time refusals are untyped: name them
            raise _run_error(err) from err

    def run_arrays(self, output_names: list[str], feeds: dict[str, np.ndarray], quiet: bool = False) -> list[np.ndarray]:
        """:meth:`run` for feeds that are all numpy arrays (no OrtValues), on a CPU provider
        (no fallback from a GPU provider to retry on). ``quiet``: a failure is only raised, not
        also printed by ONNX Runtime's logger (a probe on random inputs, whose failure is expected)."""
        try:
            return self._run_arrays(output_names, feeds, _quiet_run() if quiet else None)
        except Exception as err:
            raise _run_error(err) from err


def _run_error(err: Exception) -> KernelError:
    """ONNX Runtime's failure to run, typed: its INVALID_ARGUMENT status (an index out of range,
    a size the model cannot take) blames the inputs, anything else the run."""
    message = f"ONNX Runtime failed to run the model: {_first_line(err)}"
    return InputValueError(message) if type(err).__name__ == "InvalidArgument" else KernelError(message)


@functools.lru_cache(maxsize=1)
def _quiet_run():
    import onnxruntime

    options = onnxruntime.RunOptions()
    options.log_severity_level = 4  # fatal only
    return options


def _check_provider(session, config: SessionConfig) -> None:
    """ONNX Runtime answers a CUDA provider it cannot start (a bad option, a missing library) by
    printing an error and running on the CPU: refuse that instead of running slowly."""
    if config.device != "cpu" and "CUDAExecutionProvider" not in session.get_providers():
        raise EngineUnavailableError(
            f"ONNX Runtime did not start its CUDA provider with the options {dict(providers(config)[0][1])} "
            f"and fell back to the CPU ({session.get_providers()}): check the CUDA/cuDNN installation "
            "(onnxruntime.preload_dlls()) and the options; an option this ONNX Runtime does not know does this"
        )


def _staging(entry: Path, key: str) -> Path | None:
    """A fresh folder beside the cache ``entry`` to write the optimized model into, or None when
    the cache cannot be written (no HOME, a read-only root on an edge device): the session is then
    built without caching it, with a warning, where the load used to fail."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{key}.", dir=entry.parent))
    except OSError as err:
        _warn_uncached(entry.parent, err.strerror or str(err))
        return None


@functools.lru_cache(maxsize=8)
def _warn_uncached(folder: Path, reason: str) -> None:
    """Once per folder and reason: every session of every load would say it again."""
    import warnings

    warnings.warn(f"ONNX Runtime sessions are not cached: {folder} cannot be written ({reason}); "
                  "each load optimizes the model again (pass cache_dir= a writable folder, or None)",
                  RuntimeWarning, stacklevel=2)


def create(ort, lower: Callable[[], Lowered], config: SessionConfig, identity: str | None = None) -> Session:
    """A session for the model ``lower()`` produces: from the cache when an entry exists, else built and cached.

    ``identity`` names the lowered model without building it (the model file's identity, the part
    of it lowered, the lowering code): with it, a cache hit skips lowering, and onnx is never
    imported. Without it the key is a hash of the lowered model and its weights.
    """
    lowered = None
    if config.cache_dir is None:
        key = None
    elif identity is not None:
        key = _digest(hashlib.sha256(identity.encode()).hexdigest(), ort, config)
    else:
        lowered = lower()
        key = cache_key(ort, lowered, config)
    entry = config.cache_dir / "ort" / key if key else None
    if entry is not None and (entry / "model.onnx").exists():
        try:
            options = session_options(ort, config, level="disable")
            session = ort.InferenceSession(str(entry / "model.onnx"), options, providers=providers(config))
        except Exception:  # a damaged entry: drop it and build afresh
            shutil.rmtree(entry, ignore_errors=True)
        else:
            _check_provider(session, config)
            return Session(session, [], cached=True)
    lowered = lowered if lowered is not None else lower()
    options = session_options(ort, config)
    keep_alive = _add_external_initializers(ort, options, lowered)
    staging = _staging(entry, key) if entry is not None and config.optimization != "disable" else None
    if staging is not None:
        options.optimized_model_filepath = str(staging / "model.onnx")
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        session = ort.InferenceSession(lowered.model.SerializeToString(), options, providers=providers(config))
    except Exception as err:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        match = _MISSING_KERNEL.search(str(err))
        if match:
            op_type, node = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
            raise MissingKernel(str(err), op_type, node) from err
        unknown = _UNKNOWN_OP.search(str(err))
        if unknown:  # an op type ONNX Runtime does not know at all: every node of it
            raise MissingKernel(str(err), unknown.group(1), None) from err
        raise thread_pools.refused(err) or OrtRejected(
            f"ONNX Runtime {ort.__version__} cannot load this model: {_first_line(err)}") from err
    try:
        _check_provider(session, config)
    except EngineUnavailableError:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    if staging is not None:
        try:
            os.replace(staging, entry)  # atomic: a concurrent loader sees no entry or a whole one
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process finished first
    return Session(session, keep_alive, cached=False)


def _add_external_initializers(ort, options, lowered: Lowered) -> list[Any]:
    if not lowered.external:
        return []
    names = list(lowered.external)
    values = [ort.OrtValue.ortvalue_from_numpy(lowered.external[name]) for name in names]
    options.add_external_initializers(names, values)
    return values


def cache_key(ort, lowered: Lowered, config: SessionConfig) -> str:
    digest = hashlib.sha256()
    digest.update(lowered.model.SerializeToString())
    if config.weights_identity is not None:
        digest.update(config.weights_identity.encode())
    else:
        for name in sorted(lowered.external):
            digest.update(name.encode())
            digest.update(memoryview(np.ascontiguousarray(lowered.external[name]).reshape(-1).view(np.uint8)))
    return _digest(digest.hexdigest(), ort, config)


def _digest(model_key: str, ort, config: SessionConfig) -> str:
    """The cache key: the model's key plus everything about the session and the machine."""
    settings = (model_key, config.device, config.threads, config.optimization, config.precision, config.device_id,
                config.gpu_mem_limit, config.cudnn_conv_algo_search, config.prefer_nhwc, config.cuda_graph,
                config.fuse_conv_bias, config.tf32, config.cuda_options, config.custom_op_libraries, ort.__version__,
                cpu_signature())
    return hashlib.sha256(repr(settings).encode()).hexdigest()[:32]
