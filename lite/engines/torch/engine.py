"""The torch engine: a .lite graph lowered to PyTorch operations and compiled by Inductor.

The main graph is cut into segments executed in order, as the ONNX Runtime engine does:
nodes the lowering table maps (:mod:`lite.engines.torch.ops`) form torch segments, each one
FX module (:mod:`lite.engines.torch.lowering`) compiled with ``torch.compile``; every other
node (custom ops, ops without a lowering, attribute combinations a lowering declines, subgraph
ops) runs on the numpy engine. ``fallback=False`` refuses such models instead, with an
:class:`UnsupportedOpError` naming every unmapped node. :meth:`TorchEngine.describe` shows the
partition.

Precision: ``precision="auto"`` computes in float16 on CUDA when the model stores float16
weights (``lite convert --fp16``), ``"fp16"`` always on CUDA, ``"fp32"`` never; the CPU
computes in float32. Inputs may be numpy arrays (outputs are numpy) or CUDA arrays that speak
DLPack — torch tensors are used as they are — and outputs then are torch tensors on the GPU.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lite.device_arrays import is_device_array
from lite.engines.base import has_half_weights
from lite.engines.host_upload import STAGED_MIN_BYTES, HostUploader
from lite.engines.partition import numpy_part, split
from lite.engines.torch.compiler import STARTUP_POLICIES, AotCompiled
from lite.engines.torch.device_kernels import DeviceKernels
from lite.engines.torch.inductor_cache import configure_cache
from lite.engines.torch.inductor_modes import MODES, check_inductor_options, compile_module, uses_cuda_graphs
from lite.engines.torch.lowering import Policy, build_module, unmapped_reason
from lite.engines.torch.precompiled import Package
from lite.errors import EngineUnavailableError, KernelError, LiteError, UnsupportedOpError
from lite.format import ir
from lite.format.dtypes import DataType, storage_dtype
from lite.ops.registry import KernelRegistry, normalize_domain

PRECISIONS = ("auto", "fp32", "fp16")


def default_cache_dir() -> Path:
    """lite's cache root, shared with the other engines' caches."""
    from lite.engines.base import default_cache_dir as root

    return root()


@dataclass
class _Segment:
    on_torch: bool
    nodes: list[ir.Node]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    module: Any = None  # the FX GraphModule (torch segments)
    runner: Any = None  # the compiled module, a DeviceKernels (CUDA custom ops) or a NumpyEngine
    on_device_kernels: bool = False  # custom nodes whose CUDA kernels run on the engine's tensors


class TorchEngine:
    """Runs a model with PyTorch (compiled by Inductor), handing unmapped nodes to the numpy engine.

    ``device``: ``"cuda"`` (or ``"cuda:N"``) or ``"cpu"``. ``mode``: one of
    :data:`lite.engines.torch.inductor_modes.MODES`; None picks ``auto`` on CUDA (per input shape, the
    faster of max-autotune and reduce-overhead, timed once and remembered: max-autotune wins at
    large batches, reduce-overhead at batch 1; :mod:`lite.engines.torch.mode_choice`) and
    ``default`` on the CPU, where ``auto`` also means ``default``. ``dynamic``: passed to
    ``torch.compile`` (False: one compiled graph per input shape). ``freezing``: fold weights
    into the compiled graph; None: on the CPU (oneDNN weight prepacking) but not on CUDA, where
    the lowering already stores weights in their final dtype and layout, and where a frozen graph
    misses Inductor's FX graph cache, so a restart took 14.2 s to full speed instead of 11.9 s
    (ResNet-50, H200, bench/gpu_engines.py; same throughput). ``cache_dir``: the cache root (Inductor's caches go to
    ``<cache_dir>/torch`` when this is the process's first engine to name one: Inductor reads one
    folder per process); None leaves torch's default. ``aot``: compile each segment ahead of
    time instead of through ``torch.compile`` (:class:`~lite.engines.torch.compiler.AotCompiled`:
    Inductor's standalone compilation of the lowered graph, no Dynamo), one artifact per input
    shape kept under ``<cache_dir>/torch/compiled``, so a later process loads the artifacts
    without tracing or compiling; with ``mode`` max-autotune / reduce-overhead on CUDA, each shape
    is replayed from a CUDA graph of lite's own, with less per-call overhead than torch.compile's.
    None (the default): on CUDA, where it is the faster on every count (ResNet-50 fp16 on an
    H200, docs/benchmarks.md: batch 1 0.46 ms against 0.54 ms, a warm start 3.9 s against 11.9 s),
    not on the CPU, where ``torch.compile`` with ``freezing`` prepacks the weights for oneDNN. ``inductor_options``:
    Inductor settings (names of ``torch._inductor.config``, e.g. ``{"max_autotune_gemm_backends":
    "TRITON"}``) applied over the mode's, as ``torch.compile(options=...)`` takes them.

    ``startup`` (ahead-of-time segments; :data:`~lite.engines.torch.compiler.STARTUP_POLICIES`):
    what the first call at an input shape whose artifact is not ready gets. ``"background"`` (the
    default on CUDA): an answer at once from the fast configuration (the lowered module, not
    compiled, replayed from a CUDA graph), while a background thread compiles the best one and
    swaps it in; ``"fast"``: the fast configuration only, nothing compiled; ``"best"`` (the default
    on the CPU): compile first, answer after (minutes with max-autotune on a cold cache).
    :meth:`wait_until_best` waits for the swaps, :meth:`startup_state` tells where each shape is.
    ``precompiled``: a package of artifacts written by ``lite compile`` (a :class:`Package`, see
    :mod:`lite.engines.torch.precompiled`); artifacts found there are not compiled.

    Custom nodes with a CUDA kernel (``CustomOps.library(..., device="cuda")``) run on the GPU
    between the compiled segments, on the engine's tensors and its current CUDA stream.
    """

    def __init__(self, model: ir.Model, device: str = "cuda", *, mode: str | None = None, precision: str = "auto",
                 channels_last: bool | None = None, dynamic: bool | None = False, freezing: bool | None = None,
                 cache_dir: str | Path | None = "default", custom_ops: KernelRegistry | None = None,
                 fallback: bool = True, aot: bool | None = None, inductor_options: Mapping[str, Any] | None = None,
                 startup: str | None = None, precompiled: Package | None = None) -> None:
        self.device = torch.device(device)
        if self.device.type not in ("cuda", "cpu"):
            raise ValueError(f"the torch engine runs on 'cuda' or 'cpu'; got device {device!r}")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise EngineUnavailableError(f"device {device!r}: this PyTorch ({torch.__version__}) sees no CUDA GPU")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        on_gpu = self.device.type == "cuda"
        self.mode = mode or ("auto" if on_gpu else "default")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if self.mode == "auto" and not on_gpu:
            self.mode = "default"  # the CPU has no CUDA graphs for the modes to differ by
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
        if aot and self.mode == "eager":
            raise ValueError("aot=True compiles ahead of time with Inductor; mode='eager' compiles nothing")
        self.aot = (on_gpu and self.mode != "eager") if aot is None else bool(aot)
        self.startup = startup or ("background" if on_gpu else "best")
        if self.startup not in STARTUP_POLICIES:
            raise ValueError(f"startup must be one of {', '.join(STARTUP_POLICIES)}; got {startup!r}")
        self.precompiled = precompiled
        self.inductor_options = check_inductor_options(inductor_options)
        if precision == "fp16" and not on_gpu:
            raise ValueError("precision='fp16' needs device='cuda': the CPU computes in float32")
        self.name = f"torch-{self.device.type}"
        self.kind = "torch"
        self.placement = self.device.type
        self.on_gpu = on_gpu
        self.model = model
        self.custom_ops = custom_ops
        half = on_gpu and (precision == "fp16" or (precision == "auto" and has_half_weights(model)))
        self.compute_precision = "fp16" if half else "fp32"
        self.policy = Policy(self.device, torch.float16 if half else torch.float32,
                             on_gpu if channels_last is None else channels_last)
        requested = default_cache_dir() if cache_dir == "default" else None if cache_dir is None else Path(cache_dir)
        # Inductor's own caches are process-wide (the first engine's folder); this engine's
        # compiled artifacts go where it was asked to keep them, whichever engine came first.
        inductor_folder = configure_cache(requested)
        self.cache_dir = inductor_folder if requested is None else requested / "torch"
        self.cuda_graphs = uses_cuda_graphs(self.mode, self.device)
        self._lock = threading.Lock()
        self._uploader: HostUploader | None = None  # large numpy inputs to the GPU (made on first use)
        graph = model.main
        self.output_names = [graph.tensors[i].name for i in graph.outputs]
        self.unmapped = self._unmapped()
        if self.unmapped and not fallback:
            listed = "\n  ".join(f"{label}: {reason}" for label, reason in self.unmapped.values())
            raise UnsupportedOpError(
                f"the torch engine does not lower {len(self.unmapped)} node(s) of this model:\n  {listed}\n"
                "Pass fallback=True to run them on the numpy engine, or use device='cpu'/'cuda' (ONNX Runtime)."
            )
        self.segments = self._build(dynamic, not on_gpu if freezing is None else freezing)
        self._direct = self._direct_segment()
        self.numpy_nodes = sum(len(s.nodes) for s in self.segments if not s.on_torch)

    # -- partition -----------------------------------------------------------------------------
    def _unmapped(self) -> dict[int, tuple[str, str]]:
        graph = self.model.main
        opset = {normalize_domain(d): v for d, v in self.model.opset_imports.items()}.get("", 1)
        unmapped = {}
        for position, node in enumerate(graph.nodes):
            reason = unmapped_reason(node, graph, opset, self.custom_ops)
            if reason is not None:
                label = f"node {node.name or position!r} ({node.domain + '::' if node.domain else ''}{node.op_type})"
                unmapped[id(node)] = (label, reason)
        return unmapped

    def _build(self, dynamic: bool | None, freezing: bool) -> list[_Segment]:
        graph = self.model.main
        segments = []
        for position, part in enumerate(split(self.model, lambda node: id(node) not in self.unmapped)):
            segment = _Segment(part.on_engine, part.nodes, part.inputs, part.outputs)
            segment.input_names = tuple(graph.tensors[i].name for i in segment.inputs)
            segment.output_names = tuple(graph.tensors[i].name for i in segment.outputs)
            if segment.on_torch:
                segment.module = build_module(self.model, segment.nodes, segment.inputs, segment.outputs, self.policy)
                if self.aot:
                    segment.runner = AotCompiled(segment.module, self.mode, self.cache_dir, cuda_graphs=self.cuda_graphs,
                                                 options=self.inductor_options, startup=self.startup,
                                                 package=self.precompiled, call_lock=self._lock)
                else:
                    segment.runner = compile_module(segment.module, self.mode, dynamic=dynamic, freezing=freezing,
                                                    options=self.inductor_options)
            elif self.on_gpu and self._device_kernels(part.nodes):
                segment.on_device_kernels = True
                segment.runner = DeviceKernels(self.model.main, part.nodes, self._device_kernels(part.nodes),
                                               self.device)
            else:
                segment.runner = numpy_part(self.model, part, position, self.custom_ops)
            segments.append(segment)
        return segments

    def _device_kernels(self, nodes: list[ir.Node]) -> list[Any] | None:
        from lite.custom_ops import device_kernels

        return device_kernels(self.custom_ops, nodes)

    # -- start-up --------------------------------------------------------------------------------
    def aot_runners(self) -> list[AotCompiled]:
        return [s.runner for s in self.segments if s.on_torch and isinstance(s.runner, AotCompiled)]

    def wait_until_best(self, timeout: float | None = None) -> bool:
        """Wait until every background compilation has been swapped in; False after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for runner in self.aot_runners():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not runner.wait_for_upgrades(left):
                return False
        return True

    def startup_state(self) -> dict[str, Any]:
        """Per input shape, which configuration serves it (``fast``, ``compiling``, ``best``, or
        ``fast (upgrade failed)`` with the reason under ``errors``), the mode of each compiled
        artifact serving (``modes``), and the package's use."""
        shapes: dict[str, str] = {}
        errors: dict[str, str] = {}
        modes: dict[str, str] = {}
        for runner in self.aot_runners():
            for signature, tier in list(runner.tiers.items()):
                label = " ".join(str(list(s[0])) for s in signature)
                shapes[label] = tier
                if signature in runner.upgrade_errors:
                    errors[label] = runner.upgrade_errors[signature]
                if signature in runner.modes_used:
                    modes[label] = runner.modes_used[signature]
        return {"policy": self.startup, "shapes": shapes, "errors": errors, "modes": modes,
                "precompiled": None if self.precompiled is None else self.precompiled.describe()}

    def describe(self) -> list[dict[str, Any]]:
        """The partition: one entry per segment (engine, node count, op types)."""
        return [{"engine": "torch" if s.on_torch else "cuda-kernel" if s.on_device_kernels else "numpy",
                 "nodes": len(s.nodes),
                 "ops": sorted({n.op_type for n in s.nodes})} for s in self.segments]

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run the main graph; numpy in, numpy out; CUDA arrays in, torch tensors (on that GPU) out.
        PyTorch's own failures (a shape a Reshape cannot take, TorchDynamo's errors) are raised
        as :class:`KernelError` naming their innermost cause."""
        try:
            return self._run(feeds)
        except LiteError:
            raise
        except Exception as err:  # noqa: BLE001 - PyTorch's run-time refusals are untyped: name them
            raise KernelError(f"PyTorch failed to run the model: {_innermost_reason(err)}") from err

    def _run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        direct = self._direct
        if direct is not None:
            # The common GPU call: one compiled segment, PyTorch tensors already on this GPU.
            tensors = [feeds[name] for name in direct.input_names]
            if all(type(t) is torch.Tensor and t.device == self.device for t in tensors):
                return dict(zip(self.output_names, self._run_direct(direct, tensors)))
        device_inputs = [v for v in feeds.values() if is_device_array(v)]
        out_device = _device_of(device_inputs[0]) if device_inputs else None
        values: dict[str, Any] = dict(feeds)
        with torch.no_grad():
            for segment in self.segments:
                if segment.on_torch:
                    values.update(self._run_torch(segment, values))
                elif segment.on_device_kernels:
                    values.update(segment.runner.run({name: self._to_torch(values[name])
                                                      for name in segment.input_names}))
                else:
                    feeds_np = {name: self._to_numpy(name, values[name]) for name in segment.input_names}
                    values.update(segment.runner.run(feeds_np))
            return {name: self._deliver(name, values[name], out_device) for name in self.output_names}

    def _direct_segment(self) -> _Segment | None:
        """The one segment when the whole graph is a single one compiled ahead of time, with the
        graph's outputs in order, replayed from CUDA graphs (the per-call fast path)."""
        segments = self.segments
        if len(segments) != 1 or not (self.cuda_graphs and self.aot) or not segments[0].on_torch:
            return None
        segment = segments[0]
        return segment if list(segment.output_names) == self.output_names else None

    def _run_direct(self, segment: _Segment, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        # No autograd is recorded: inputs that do not require gradients make none, and the
        # compiled code runs under no_grad inside its CUDA graph.
        if any(t.requires_grad for t in tensors):
            tensors = [t.detach() for t in tensors]
        with self._lock:
            results = segment.runner(*tensors)
            return [v.clone() if type(v) is torch.Tensor else v for v in results]

    def _run_torch(self, segment: _Segment, values: dict[str, Any]) -> dict[str, Any]:
        args = [self._to_torch(values[name]) for name in segment.input_names]
        if not self.cuda_graphs:
            results = segment.runner(*args)
            return dict(zip(segment.output_names, results))
        with self._lock:
            if not self.aot:  # torch.compile's CUDA-graph trees: a new step may reuse output memory
                torch.compiler.cudagraph_mark_step_begin()
            # CUDA graphs replay into the same output buffers: take copies before the next replay.
            results = segment.runner(*args)
            return {name: v.clone() if isinstance(v, torch.Tensor) else v
                    for name, v in zip(segment.output_names, results)}

    def _to_torch(self, value: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value.to(self.device)
        if isinstance(value, np.ndarray):
            if self.on_gpu and value.nbytes >= STAGED_MIN_BYTES and value.dtype.kind in "biuf":
                return self._host_uploader().upload(value)  # pinned staging, overlapped chunks
            return torch.from_numpy(np.ascontiguousarray(value) if value.flags.writeable else value.copy()).to(
                self.device)
        if is_device_array(value):
            return torch.from_dlpack(value).to(self.device)
        return torch.tensor(value, device=self.device)  # a host value (shape arithmetic) between segments

    def _host_uploader(self) -> HostUploader:
        uploader = self._uploader
        if uploader is None:
            with self._lock:
                if self._uploader is None:
                    self._uploader = HostUploader(torch, self.device)
                uploader = self._uploader
        return uploader

    def _to_numpy(self, name: str, value: Any) -> Any:
        if isinstance(value, np.ndarray) or value is None or isinstance(value, list) and value and \
                isinstance(value[0], np.ndarray):
            return value
        if is_device_array(value) and not isinstance(value, torch.Tensor):
            value = torch.from_dlpack(value)
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().numpy()
        return np.asarray(value, dtype=self._declared_numpy(name))

    def _declared_numpy(self, name: str) -> np.dtype | None:
        graph = self.model.main
        tensor = next((t for t in graph.tensors if t.name == name), None)
        if tensor is None or tensor.dtype == DataType.UNDEFINED:
            return None
        return storage_dtype(tensor.dtype)

    def _deliver(self, name: str, value: Any, out_device: torch.device | None) -> Any:
        if out_device is None:
            return self._to_numpy(name, value)
        if isinstance(value, torch.Tensor):
            return value.to(out_device)
        if is_device_array(value):
            return value
        return torch.from_numpy(np.ascontiguousarray(self._to_numpy(name, value))).to(out_device)


def _device_of(value: Any) -> torch.device:
    if isinstance(value, torch.Tensor):
        return value.device
    return torch.device("cuda", value.__dlpack_device__()[1])


def _innermost_reason(err: BaseException) -> str:
    """What ``err`` says went wrong, shortened: the deepest exception it was raised from, and of
    TorchDynamo's wrapped errors the operation's own (``... got RuntimeError("shape '[-1, 4]' is
    invalid for input of size 3")``), not its advice."""
    while err.__cause__ is not None:
        err = err.__cause__
    text = str(err).strip()
    wrapped = re.search(r"got (\w+\(.*\))\s*$", text, re.MULTILINE)
    if wrapped:
        return wrapped.group(1)[:400]
    lines = text.splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:400]
