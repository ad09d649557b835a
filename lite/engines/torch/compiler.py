"""``torch.compile`` for lowered graphs, and where Inductor keeps its on-disk caches.

Modes are torch's (https://pytorch.org/docs/stable/generated/torch.compile.html):

| mode | what Inductor does |
|---|---|
| ``eager`` | no compilation: the FX module runs op by op (lite's own name, for debugging) |
| ``default`` | fused Triton / C++ kernels |
| ``reduce-overhead`` | as default, plus CUDA graphs (one per input shape) |
| ``max-autotune`` | benchmarks matmul/conv implementations at compile time, plus CUDA graphs |
| ``max-autotune-no-cudagraphs`` | the same without CUDA graphs |

Compilation is specialised per input shape by default (``dynamic=False``): each batch size is a
bucket compiled (and on CUDA captured) once, like the ONNX Runtime engine's CUDA graphs; torch
recompiles at most ``torch._dynamo.config.recompile_limit`` (8) times per graph, then runs it
uncompiled.

Caches: the FX graph cache, the AOTAutograd cache, autotuning results and Triton kernels all
live under ``TORCHINDUCTOR_CACHE_DIR``; :func:`configure_cache` points it at lite's cache root
(``<cache_dir>/torch``) so a second process finds the compiled kernels instead of recompiling.
Inductor reads that variable process-wide: the first engine that names a folder sets it, and a
variable the user set before wins.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger("lite.engines.torch")

MODES = ("eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
_cache_lock = threading.Lock()


def configure_cache(cache_dir: Path | None) -> Path | None:
    """Point Inductor's caches at ``cache_dir / "torch"``; returns the folder in use (None: torch's default)."""
    with _cache_lock:
        current = os.environ.get(CACHE_VARIABLE)
        if current is None and cache_dir is not None:
            folder = Path(cache_dir) / "torch"
            folder.mkdir(parents=True, exist_ok=True)
            os.environ[CACHE_VARIABLE] = str(folder)
            current = str(folder)
        # On by default in torch ≥ 2.4; stated here because a restart without them recompiles everything.
        torch._inductor.config.fx_graph_cache = True
        torch._functorch.config.enable_autograd_cache = True
        return None if current is None else Path(current)


def uses_cuda_graphs(mode: str, device: torch.device) -> bool:
    return device.type == "cuda" and mode in ("reduce-overhead", "max-autotune")


def compile_module(module: torch.nn.Module, mode: str, *, dynamic: bool | None, freezing: bool) -> Callable:
    """``module`` compiled by Inductor in ``mode`` (or itself for ``eager``)."""
    if mode == "eager":
        return module
    options = dict(torch._inductor.list_mode_options(mode))
    # Freezing folds the weights into the compiled graph as constants (conv+bn folding,
    # weight layout and prepacking for the CPU's oneDNN kernels): right for inference.
    options["freezing"] = freezing
    return torch.compile(module, backend="inductor", options=options, dynamic=dynamic)


# A child process compiles a package (AOTInductor, from the exported program saved by the parent)
# and loads it once: a package that crashes the loader (it happens: PyTorch 2.11 on an H200
# faults inside ``aoti_load_package``, docs/benchmarks.md) kills that child, not the caller.
_COMPILE_AND_LOAD = """
import json, sys, torch, torch._inductor
program, package, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if program:
    torch._inductor.aoti_compile_and_package(torch.export.load(program), package_path=package,
                                             inductor_configs=options)
torch._inductor.aoti_load_package(package)
"""
_CHILD_TIMEOUT_S = 3600.0  # max-autotune on a large network takes minutes


class AotCompiled:
    """A segment compiled ahead of time by AOTInductor, one package per input signature, kept on
    disk: a later process loads the package (a shared library plus the weights) instead of
    tracing and compiling again, which is what makes a warm start fast (``torch.compile`` still
    re-traces the module with Dynamo and re-runs AOTAutograd on every start, cache or not).

    A package is compiled, and loaded once, in a child process; only a package that loaded there
    is loaded here (a marker file next to it records that, so a warm start skips the check). If
    the child fails (the compiler or the loader raised or crashed), calls run through
    ``torch.compile`` instead, said once in the log and in ``aot_declined``.

    ``cuda_graphs``: on CUDA, each signature's calls are captured in a CUDA graph once and
    replayed (static input buffers; outputs are the graph's buffers, so the caller copies them
    before the next call). Packages live in ``folder`` under a key made of the module's code, its
    weights, the signature, the Inductor options and the torch / GPU versions.
    """

    def __init__(self, module: torch.nn.Module, mode: str, folder: Path | None, *, cuda_graphs: bool) -> None:
        self.module = module
        self.mode = mode
        options = dict(torch._inductor.list_mode_options(mode))
        options.pop("triton.cudagraphs", None)  # graphs are captured here, around the package
        self.options = options
        self.folder = folder
        self.cuda_graphs = cuda_graphs
        self.runners: dict[tuple, Callable] = {}
        self.graph_declined: str | None = None  # why a capture failed (calls then run uncaptured)
        self.aot_declined: str | None = None  # why a package could not be made or loaded
        self._jit: Callable | None = None
        self._weights_digest: str | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: torch.Tensor):
        signature = tuple((tuple(a.shape), str(a.dtype), str(a.device)) for a in args)
        runner = self.runners.get(signature)
        if runner is None:
            with self._lock:
                runner = self.runners.get(signature) or self._prepare(signature, args)
                self.runners[signature] = runner
        return runner(*args)

    def _prepare(self, signature: tuple, args: tuple[torch.Tensor, ...]) -> Callable:
        try:
            package = self._package(signature, args)
        except AotUnavailable as err:
            if self.aot_declined is None:
                log.warning("AOTInductor declined, running through torch.compile instead: %s", err)
            self.aot_declined = str(err)
            if self._jit is None:
                self._jit = compile_module(self.module, self.mode, dynamic=False, freezing=False)
            return self._jit
        compiled = torch._inductor.aoti_load_package(str(package))
        if self.cuda_graphs and args and args[0].is_cuda:
            try:
                return _Graphed(compiled, args)
            except RuntimeError as err:  # a package the capture rejects still runs, uncaptured
                self.graph_declined = f"{type(err).__name__}: {err}"
        return lambda *inputs: compiled(*inputs)

    def _package(self, signature: tuple, args: tuple[torch.Tensor, ...]) -> Path:
        """The package for ``signature``, compiled (in a child) if the cache has none, and known
        to load in a fresh process; raises :class:`AotUnavailable` otherwise."""
        key = hashlib.sha256(repr((self.module.code, self._weights(), signature, sorted(self.options.items()),
                                   torch.__version__, _device_name(args))).encode()).hexdigest()[:32]
        folder = self.folder or Path(tempfile.mkdtemp(prefix="lite-aoti-"))
        path = folder / "aoti" / f"{key}.pt2"
        loads = path.with_name(f"{key}.loads")  # the package loaded in a fresh process
        if path.exists() and loads.exists():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():  # made by an older version, or the check was cut short: check it
            self._in_child("", path)
        else:
            staging = path.with_name(f".{key}.{os.getpid()}.pt2")
            program = path.with_name(f".{key}.{os.getpid()}.program.pt2")
            try:
                torch.export.save(torch.export.export(self.module, tuple(args), strict=False), str(program))
                self._in_child(str(program), staging)
                os.replace(staging, path)  # whole packages only: a reader never sees a half-written one
            finally:
                program.unlink(missing_ok=True)
                staging.unlink(missing_ok=True)
        loads.touch()
        return path

    def _in_child(self, program: str, package: Path) -> None:
        """Compile ``program`` (a saved ExportedProgram; empty: only load) into ``package`` and
        load it, in a child process; raises :class:`AotUnavailable` if it fails."""
        try:
            out = subprocess.run([sys.executable, "-c", _COMPILE_AND_LOAD, program, str(package),
                                  json.dumps(self.options)], capture_output=True, text=True,
                                 timeout=_CHILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as err:
            raise AotUnavailable(f"compiling {package.name} took over {_CHILD_TIMEOUT_S:.0f} s") from err
        if out.returncode != 0:
            how = f"died of signal {-out.returncode}" if out.returncode < 0 else f"exited with {out.returncode}"
            detail = " | ".join(line for line in out.stderr.strip().splitlines()[-3:] if line.strip())
            step = "compiling and loading" if program else "loading"
            raise AotUnavailable(f"{step} {package.name} in a fresh process: it {how}"
                                 + (f" ({detail[-400:]})" if detail else ""))

    def _weights(self) -> str:
        if self._weights_digest is None:
            digest = hashlib.blake2b(digest_size=16)
            for name, tensor in sorted(self.module.state_dict().items()):
                digest.update(name.encode())
                digest.update(str(tensor.dtype).encode() + repr(tuple(tensor.shape)).encode())
                digest.update(tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
            self._weights_digest = digest.hexdigest()
        return self._weights_digest


class AotUnavailable(RuntimeError):
    """A package could not be compiled or loaded (the engine falls back to torch.compile)."""


class _Graphed:
    """A compiled package replayed from a CUDA graph: inputs copied into static buffers."""

    def __init__(self, compiled: Callable, example: tuple[torch.Tensor, ...]) -> None:
        self.inputs = [torch.empty_like(a) for a in example]
        for buffer, value in zip(self.inputs, example):
            buffer.copy_(value)
        stream = torch.cuda.Stream(device=example[0].device)
        stream.wait_stream(torch.cuda.current_stream(example[0].device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up outside the capture (lazy initialisation, workspaces)
                compiled(*self.inputs)
        torch.cuda.current_stream(example[0].device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = compiled(*self.inputs)

    def __call__(self, *args: torch.Tensor):
        for buffer, value in zip(self.inputs, args):
            buffer.copy_(value)
        self.graph.replay()
        return self.outputs


def _device_name(args: tuple[torch.Tensor, ...]) -> str:
    device = args[0].device if args else torch.device("cpu")
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
