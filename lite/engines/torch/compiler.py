"""Lowered graphs compiled ahead of time, one artifact per input shape, kept on disk
(Inductor's own on-disk caches: :mod:`lite.engines.torch.inductor_cache`).

The modes and the Inductor settings each compiles with are in
:mod:`lite.engines.torch.inductor_modes`; the names are re-exported here. In ``auto`` (the default
on CUDA), when a shape is compiled, both candidate artifacts are compiled, each replayed from its
CUDA graph on the same inputs in interleaved rounds, and the faster serves; the choice is kept
beside the artifacts (:mod:`lite.engines.torch.mode_choice`) and in ``lite compile``'s package, so
later processes load the winner without timing again.

Compilation is specialised per input shape by default (``dynamic=False``): each batch size is a
bucket compiled (and on CUDA captured) once, like the ONNX Runtime engine's CUDA graphs; torch
recompiles at most ``torch._dynamo.config.recompile_limit`` (8) times per graph, then runs it
uncompiled.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lite.engines.torch.graphs import Graphed, device_arch, lift_weights
from lite.engines.torch.inductor_modes import AUTO_CANDIDATES, compile_module, mode_settings
from lite.engines.torch.inductor_modes import MODES as MODES  # where the package and its tests took it from
from lite.engines.torch.mode_choice import choose_mode, known_choice

log = logging.getLogger("lite.engines.torch")

# What a call at a new input shape gets while its artifact is not in the cache (docs/runtime.md):
# "best" compiles it first (minutes with max-autotune); "fast" never compiles, running the
# lowered module op by op (replayed from a CUDA graph on CUDA); "background" answers from the
# fast configuration at once and swaps the compiled artifact in when a background thread has
# made it.
STARTUP_POLICIES = ("background", "fast", "best")


class AotCompiled:
    """A segment compiled ahead of time, one artifact per input signature, kept on disk: a later
    process loads the artifact instead of tracing and compiling again, which is what makes a warm
    start fast (``torch.compile`` re-traces the module with Dynamo and re-runs AOTAutograd on every
    start, cache or not).

    Artifacts are Inductor's own (``torch._inductor.standalone_compile``, saved unpacked): the
    generated Python wrapper with its Triton / C++ kernels, loaded the way Inductor loads its
    cache hits. The FX module's weights are lifted to leading inputs before compiling,
    so an artifact holds code only: it depends on the weights' shapes, dtypes and strides, not on
    their values, and calls pass the engine's own weight tensors (no second copy on the GPU).
    An artifact that does not load (damaged, or from another build) is compiled again and
    replaced; if compiling fails, calls run through ``torch.compile`` instead, said once in the
    log and in ``aot_declined``.

    As ``torch.compile`` does, at most ``torch._dynamo.config.recompile_limit`` (8) signatures
    are compiled; calls of further ones run the module uncompiled (``uncompiled`` lists them).

    ``cuda_graphs``: on CUDA, each signature's calls are captured in a CUDA graph once and
    replayed (static input buffers; outputs are the graph's buffers, so the caller copies them
    before the next call). Artifacts live in ``folder / "compiled"`` under a key made of the
    module's code, the weights' metadata, the signature, the Inductor options and the torch,
    CUDA and GPU versions.
    """

    def __init__(self, module: torch.nn.Module, mode: str, folder: Path | None, *, cuda_graphs: bool,
                 options: Mapping[str, Any] | None = None, startup: str = "best", package: Any = None,
                 call_lock: threading.Lock | None = None, candidates: tuple[str, ...] | None = None) -> None:
        if startup not in STARTUP_POLICIES:
            raise ValueError(f"startup must be one of {', '.join(STARTUP_POLICIES)}; got {startup!r}")
        self.module = module
        self.mode = mode
        # The modes a shape's artifact may be compiled in: ``auto`` times them and keeps the faster.
        self.candidates = candidates or (AUTO_CANDIDATES if mode == "auto" else (mode,))
        self.startup = startup
        self.package = package  # a precompiled.Package, or None
        # Held around every call of a CUDA-graph runner (the engine's lock): a swapped-in
        # artifact is captured under it, so no replay of this segment runs during the capture.
        self.call_lock = call_lock or threading.Lock()
        self.tiers: dict[tuple, str] = {}  # signature -> "fast" | "compiling" | "best" | "fast (upgrade failed)"
        self.upgrade_errors: dict[tuple, str] = {}
        self.modes_used: dict[tuple, str] = {}  # signature -> the mode of the artifact serving it
        self.choices: dict[str, dict[str, Any]] = {}  # choice key -> the timed choice (mode_choice.record)
        self._pending: list[tuple[tuple, tuple[torch.Tensor, ...]]] = []
        self._upgrader: threading.Thread | None = None
        self._upgrades_done = threading.Condition()
        self._user_options = dict(options or {})
        self.folder = folder
        self.cuda_graphs = cuda_graphs
        self.runners: dict[tuple, Callable] = {}
        self.graph_declined: str | None = None  # why a capture failed (calls then run uncaptured)
        self.aot_declined: str | None = None  # why an artifact could not be made
        self.reloaded: list[str] = []  # artifacts found unloadable and compiled again (their reasons)
        self.uncompiled: list[list[tuple]] = []  # input shapes past the compile limit, run uncompiled
        self.artifact_keys: list[str] = []  # the artifacts serving this segment's shapes (lite compile packs them)
        self._lifted, self._weights = lift_weights(module)
        self._jit: Callable | None = None
        self._lock = threading.Lock()

    @property
    def options(self) -> dict[str, Any]:
        """The Inductor settings of the first candidate mode (the only one outside ``auto``)."""
        return mode_settings(self.candidates[0], self._user_options)

    def __call__(self, *args: torch.Tensor):
        # torch.Size, dtypes and devices hash as they are: no strings built per call.
        signature = tuple((a.shape, a.dtype, a.device) for a in args)
        runner = self.runners.get(signature)
        if runner is None:
            with self._lock:
                runner = self.runners.get(signature) or self._prepare(signature, args)
                self.runners.setdefault(signature, runner)
                runner = self.runners[signature]
        return runner(*args)

    def _prepare(self, signature: tuple, args: tuple[torch.Tensor, ...]) -> Callable:
        limit = getattr(torch._dynamo.config, "recompile_limit", 8)
        if len(self.runners) >= limit:  # as torch.compile does past its limit: run uncompiled
            if not self.uncompiled:
                log.warning("more than %d input shapes: shapes from %s on run uncompiled (each new shape would "
                            "compile for minutes); pad the inputs to a few sizes (lite serve pads batches on a GPU)",
                            limit, [tuple(a.shape) for a in args])
            self.uncompiled.append([tuple(a.shape) for a in args])
            return self.module
        if self.startup == "best" or self._artifact_ready(args):
            self.tiers[signature] = "best"
            return self._best(args)
        fast = self._fast(args)
        self.tiers[signature] = "fast"
        if self.startup == "background":
            self._upgrade_later(signature, args)
        return fast

    def _best(self, args: tuple[torch.Tensor, ...], capture_lock: Any = None) -> Callable:
        """The compiled artifact for ``args``' signature (loaded, installed from the package or
        compiled; in ``auto``, the timed choice), replayed from a CUDA graph where the segment
        uses them, each graph captured under ``capture_lock`` when one is given (a background
        upgrade; then an artifact that cannot be made raises :class:`AotUnavailable`)."""
        signature = tuple((a.shape, a.dtype, a.device) for a in args)
        lock = capture_lock or contextlib.nullcontext()
        try:
            mode = self._mode_for(args)
            if mode is None:
                mode, runner = choose_mode(self, args, lock)
            else:
                runner = self.mode_runner(args, mode, lock)
        except AotUnavailable as err:
            if capture_lock is not None:
                raise
            if self.aot_declined is None:
                log.warning("ahead-of-time compilation declined, running through torch.compile instead: %s", err)
            self.aot_declined = str(err)
            if self._jit is None:
                self._jit = compile_module(self.module, self.candidates[0], dynamic=False, freezing=False,
                                           options=self._user_options)
            return self._jit
        self.modes_used[signature] = mode
        self.artifact_keys.append(self.key(args, mode))
        return runner

    def mode_runner(self, args: tuple[torch.Tensor, ...], mode: str, capture_lock: Any) -> Callable:
        """``mode``'s artifact for ``args`` as a callable of the inputs (graphed where the segment is)."""
        artifact = self._artifact(args, mode)
        weights = self._weights

        def run(*inputs: torch.Tensor):
            return artifact(*weights, *inputs)

        with capture_lock:
            return self._graphed(run, args)

    def _mode_for(self, args: tuple[torch.Tensor, ...]) -> str | None:
        """The mode ``args``' artifact is made in; None when ``auto`` has yet to time the candidates."""
        if len(self.candidates) == 1:
            return self.candidates[0]
        return known_choice(self, args)

    def _fast(self, args: tuple[torch.Tensor, ...]) -> Callable:
        """The quick configuration: the lowered module itself, nothing compiled (cuDNN and cuBLAS
        do the heavy layers), replayed from a CUDA graph so that its hundreds of small launches
        cost one."""
        return self._graphed(self.module, args)

    def _graphed(self, run: Callable, args: tuple[torch.Tensor, ...]) -> Callable:
        if self.cuda_graphs and args and args[0].is_cuda:
            try:
                return Graphed(run, args)
            except RuntimeError as err:  # what the capture rejects still runs, uncaptured
                self.graph_declined = f"{type(err).__name__}: {err}"
        return run

    # -- background upgrade ----------------------------------------------------------------------
    def _upgrade_later(self, signature: tuple, args: tuple[torch.Tensor, ...]) -> None:
        """Queue ``signature`` for compilation on this segment's upgrade thread (one at a time:
        Inductor's settings are process-wide while it compiles)."""
        example = tuple(torch.empty_like(a).copy_(a) for a in args)  # the caller may free its inputs
        with self._upgrades_done:
            self._pending.append((signature, example))
            self.tiers[signature] = "compiling"
            if self._upgrader is None or not self._upgrader.is_alive():
                self._upgrader = threading.Thread(target=self._upgrade_pending, name="lite-torch-upgrade",
                                                  daemon=True)
                self._upgrader.start()

    def _upgrade_pending(self) -> None:
        while True:
            with self._upgrades_done:
                if not self._pending:
                    self._upgrades_done.notify_all()
                    return
                signature, example = self._pending.pop(0)
            started = time.perf_counter()
            try:
                with torch.no_grad():  # each graph is captured under the call lock: no replay meanwhile
                    best = self._best(example, capture_lock=self.call_lock)
                self.runners[signature] = best  # the swap: one dictionary store, atomic
                self.tiers[signature] = "best"
                log.info("input shapes %s: the compiled configuration replaced the fast one after %.1f s",
                         [s[0] for s in signature], time.perf_counter() - started)
            except Exception as err:  # noqa: BLE001 - any failure leaves the fast configuration serving
                reason = f"{type(err).__name__}: {err}"
                self.upgrade_errors[signature] = reason
                self.tiers[signature] = "fast (upgrade failed)"
                log.warning("input shapes %s: compiling the best configuration failed, the fast one keeps "
                            "serving: %s", [s[0] for s in signature], reason)

    def wait_for_upgrades(self, timeout: float | None = None) -> bool:
        """Block until every queued upgrade is done (True) or ``timeout`` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._upgrades_done:
            while self._pending or (self._upgrader is not None and self._upgrader.is_alive()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._upgrades_done.wait(0.5 if left is None else min(left, 0.5))
        return True

    def key(self, args: tuple[torch.Tensor, ...], mode: str | None = None) -> str:
        """The artifact's name: what its code depends on. Devices enter as their type and the GPU
        as its architecture, so a package compiled on one H100 serves another, or an H200. With
        ``mode="auto"``: the name of the timed choice among the candidates for ``args``."""
        options = (sorted(self._user_options.items()), self.candidates) if mode == "auto" else \
            sorted(mode_settings(mode or self.candidates[0], self._user_options).items())
        weights = [(tuple(w.shape), tuple(w.stride()), str(w.dtype), w.device.type) for w in self._weights]
        signature = [(tuple(a.shape), tuple(a.stride()), str(a.dtype), a.device.type) for a in args]
        return hashlib.sha256(repr((self._lifted.code, lowering_digest(), weights, signature,
                                    options, torch.__version__, torch.version.cuda,
                                    device_arch(args))).encode()).hexdigest()[:32]

    def _artifact_ready(self, args: tuple[torch.Tensor, ...]) -> bool:
        """Whether ``args``' artifact loads without compiling or timing (in the cache or the package)."""
        mode = self._mode_for(args)
        if mode is None:
            return False
        key = self.key(args, mode)
        if self.folder is not None and (self.folder / "compiled" / key).is_dir():
            return True
        return self.package is not None and self.package.artifact(key) is not None

    def _artifact(self, args: tuple[torch.Tensor, ...], mode: str) -> Callable:
        with _COMPILE_LOCK:
            return self._load_or_compile(args, mode)

    def _load_or_compile(self, args: tuple[torch.Tensor, ...], mode: str) -> Callable:
        """``mode``'s compiled artifact for ``args``' signature: loaded from the cache, or compiled
        (and saved); raises :class:`AotUnavailable` when it cannot be compiled.

        Artifacts are saved unpacked, one folder each, and loaded with that folder as Inductor's
        cache: the Triton kernels tune their launch configurations on their first calls and
        keep the choice next to their code, so only the first process to run an artifact pays
        for that tuning (seconds for ResNet-50), not every later start. Without a cache folder
        (``cache_dir=None``) nothing is written: the artifact runs from memory."""
        folder = None if self.folder is None else self.folder / "compiled"
        key = self.key(args, mode)
        path = Path(key) if folder is None else folder / key
        packaged = None if self.package is None else self.package.install(key, folder)
        if packaged is not None and folder is None:
            return _load(packaged)  # no cache: run from the package's own folder
        if folder is not None and path.is_dir():
            try:
                return _load(path)
            except Exception as err:  # noqa: BLE001 - any failure to load means: compile it again
                reason = f"{path.name}: {type(err).__name__}: {err}"
                log.warning("a compiled artifact in the cache does not load, compiling it again: %s", reason)
                self.reloaded.append(reason)
                shutil.rmtree(path, ignore_errors=True)
        example = [*self._weights, *args]
        log.info("compiling %s ahead of time for inputs %s (mode %s; minutes with max-autotune)", path.name,
                 [tuple(a.shape) for a in args], mode)
        started = time.perf_counter()
        try:
            with torch.no_grad():
                # Traced to ATen operators first: the lowering's own Python functions would make
                # AOTAutograd's cache (which the saved artifact is made of) refuse the graph.
                traced = make_fx(self._lifted, tracing_mode="fake")(*example)
                # Options as a config patch: torch 2.11 passes standalone_compile's ``options`` to
                # compile_fx as keyword arguments, which refuses Inductor's settings.
                with torch._inductor.config.patch(mode_settings(mode, self._user_options)):
                    artifact = torch._inductor.standalone_compile(traced, example,
                                                                  dynamic_shapes="from_example_inputs")
        except Exception as err:  # an Inductor failure: torch.compile takes over
            raise AotUnavailable(f"standalone_compile failed: {type(err).__name__}: {err}") from err
        log.info("compiled %s in %.1f s", path.name, time.perf_counter() - started)
        if folder is None:
            return artifact
        staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            artifact.save(path=str(staging), format="unpacked")
            os.replace(staging, path)  # whole artifacts only: a reader never sees a half-written one
        except Exception as err:  # noqa: BLE001 - another process saved it first, a read-only or full
            # cache, or a graph Inductor cannot serialize: this process runs the artifact anyway
            if not path.is_dir():
                log.warning("could not save the compiled artifact to %s (%s: %s); the next start compiles "
                            "it again", path, type(err).__name__, err)
                return artifact
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        try:  # run from the saved folder, so that the kernels' tuning is kept there
            return _load(path)
        except Exception as err:  # noqa: BLE001 - the compiled artifact still runs
            log.warning("the compiled artifact saved to %s does not load (%s): running it from memory", path, err)
            return artifact


def _load(path: Path) -> Callable:
    # Inductor points TORCHINDUCTOR_CACHE_DIR at the folder while it loads (process-wide, for
    # the length of the load): a compilation in another thread meanwhile uses that folder too.
    return torch._inductor.CompiledArtifact.load(path=str(path), format="unpacked")


_LOWERING_DIGEST: str | None = None
# One compilation at a time in this process: Inductor's settings are patched process-wide
# while it compiles (a background upgrade and a first call of another model could overlap).
_COMPILE_LOCK = threading.RLock()


def lowering_digest() -> str:
    """A digest of this package's sources: the lowered graph's code names the lowering functions
    but not their bodies, so a changed lowering must not meet an artifact made from the old one."""
    global _LOWERING_DIGEST
    if _LOWERING_DIGEST is None:
        digest = hashlib.sha256()
        package = Path(__file__).resolve().parent
        for source in sorted(package.rglob("*.py")):
            digest.update(str(source.relative_to(package)).encode())
            digest.update(source.read_bytes())
        _LOWERING_DIGEST = digest.hexdigest()
    return _LOWERING_DIGEST


class AotUnavailable(RuntimeError):
    """A segment could not be compiled ahead of time (the engine falls back to torch.compile)."""
