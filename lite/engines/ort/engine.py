"""The ONNX Runtime engine: CPU, CUDA and TensorRT execution providers behind ``lite.Model``.

The .lite graph is lowered to ONNX (:mod:`lite.format.onnx.lower`) and run by an
``InferenceSession``. Nodes ONNX Runtime cannot run (custom ops, ops without an implementation
in the provider) stay on the numpy engine: the main graph is cut into segments executed in
order, each an ONNX Runtime session or a numpy plan, with arrays handed from one to the next
as they are (ONNX Runtime reads contiguous numpy inputs in place on the CPU).

Unsupported nodes are found two ways: by the op's domain and schema before the first session
is built, and by ONNX Runtime itself, whose "Could not find an implementation" error names the
node; that node then moves to the numpy engine and the segments are rebuilt.

On GPUs, custom nodes registered with CUDA kernels run as segments of their own between the ONNX
Runtime segments, on device memory and the engine's CUDA stream (:mod:`lite.engines.ort.device_kernels`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lite.cpu import int8_products_saturate
from lite.engines.base import has_half_weights
from lite.engines.ort import int8_choice, sessions, thread_choice
from lite.engines.ort.cuda import CudaRunner, torch_stream
from lite.engines.ort.device_kernels import CudaStream, KernelSteps
from lite.engines.ort.empty_inputs import has_empty_axis, has_recurrent_layers
from lite.engines.ort.segments import (
    Segment,
    TypedOnFirstRun,
    as_text,
    host_array,
    run_in_order,
    run_on_device,
)
from lite.engines.partition import Part, numpy_part, split
from lite.errors import EngineUnavailableError, LiteError, UnsupportedOpError
from lite.format import ir
from lite.format.dtypes import DataType
from lite.format.onnx.graph import lowering_fingerprint, node_name
from lite.ops.registry import KernelRegistry, normalize_domain

_ORT_DOMAINS = {"", "com.microsoft", "com.microsoft.nchwc", "ai.onnx.ml"}
_MAX_REPARTITIONS = 16
# What this engine does besides lowering (cutting the graph, rewriting the lowered model): a change
# to them must not reuse a cached session either.
_HERE = Path(__file__).resolve().parent
_REWRITES = (_HERE / "half.py", _HERE / "unsigned.py", _HERE / "rewrites.py", _HERE / "dequantized.py",
             _HERE / "int8_choice.py", _HERE.parent / "partition.py")
_FLOAT_FORM = "float form"  # the form of an int8 model run on dequantized weights (see int8_choice.py)


class OrtEngine:
    """Runs a model with ONNX Runtime, handing unsupported nodes to the numpy engine."""

    def __init__(self, model: ir.Model, device: str = "cpu", *, threads: int | None = None,
                 custom_ops: KernelRegistry | None = None, options: sessions.SessionConfig | None = None) -> None:
        self.model = model
        self.name = device
        self.kind = "onnxruntime"
        self.placement = device
        self.on_gpu = device != "cpu"
        self.custom_ops = custom_ops
        self.stream: CudaStream | None = None  # made when a CUDA custom kernel runs (see _build)
        config = options or sessions.SessionConfig(device=device, threads=threads)
        self.config = config
        self.compute_precision = "fp16" if self._half_compute() else "as stored"
        # x86 CPUs without VNNI saturate in ONNX Runtime's U8S8 kernels: give them U8U8 (exact).
        self.unsigned_weights = device == "cpu" and int8_products_saturate()
        if device != "cpu" and config.tf32 is None and self.compute_precision != "fp16":
            config = self.config = dataclasses.replace(config, tf32=False)  # float32 means float32
        # Segments run without CUDA graphs; the graphed session (if any) is built beside them.
        self.plain_config = dataclasses.replace(config, cuda_graph=False)
        self.cuda_graph_declined: str | None = None
        self.ort = sessions.import_onnxruntime(device)
        # int8 models on the CPU: int8 kernels, or the float form where that is faster (int8_choice.py).
        self.int8_form = "as stored"
        wanted = int8_choice.wanted(model, config.int8_compute) if device == "cpu" else "int8"
        self.decision = int8_choice.kept_as_quantized(model, config.int8_compute) if device == "cpu" else None
        if wanted == "auto":
            self.decision = int8_choice.recorded(self._decision_path())
            if self.decision is not None:
                self.decision["reused"] = True
                self.int8_form = _FLOAT_FORM if self.decision["chosen"] == "float" else "as stored"
        on_numpy = {id(n) for n in model.main.nodes if not self._supported(n)}
        self._on_numpy = on_numpy
        self.recurrent = has_recurrent_layers(model)
        self._empty_runner: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
        self._rebuild_lock = threading.Lock()
        for _ in range(_MAX_REPARTITIONS):
            try:
                self.segments = self._build(on_numpy)
                break
            except sessions.MissingKernel as missing:
                moved = {id(n) for n in self._nodes_named(missing)} - on_numpy
                if not moved:
                    raise UnsupportedOpError(str(missing)) from missing
                on_numpy |= moved
        else:
            raise UnsupportedOpError(f"ONNX Runtime rejected more than {_MAX_REPARTITIONS} nodes of this model")
        graph = model.main
        self.output_names = [graph.tensors[i].name for i in graph.outputs]
        self.numpy_nodes = sum(len(s.nodes) for s in self.segments if not s.on_ort and not s.on_device_kernels)
        self.gpu = self._gpu_runner() if device != "cpu" else None
        if wanted != "int8" and self.decision is None:
            self.decision = self._settle_int8(wanted)
        self.direct = self._direct_session()
        # Many cores, a small model: fewer threads may serve its small calls faster (thread_choice.py).
        self.direct, self.threads_decision = thread_choice.settle(self)

    def _settle_int8(self, wanted: str) -> dict[str, Any]:
        """Keep the int8 kernels or take the float form (``wanted``: "auto" measures, "float" takes it)."""
        segment = self.segments[0]
        if len(self.segments) != 1 or not isinstance(segment.runner, sessions.Session):
            return {"chosen": "int8", "why": "the graph is partitioned: its int8 kernels run as they are"}
        self.int8_form = _FLOAT_FORM
        try:
            floated = self._runner(segment, 0, 1)  # the session a later load builds or finds in the cache
        except (UnsupportedOpError, sessions.MissingKernel) as err:
            self.int8_form = "as stored"
            return {"chosen": "int8", "why": f"no float form: {err}"}
        if wanted == "float":
            decision = {"chosen": "float", "why": "int8_compute='float'"}
        else:
            int8 = segment.runner
            try:
                decision = int8_choice.measure(self._outputs_of(int8), self._outputs_of(floated),
                                               int8_choice.random_feeds(self.model), self._numpy_reference,
                                               lambda ms: thread_choice.both_forms(self, ms, _FLOAT_FORM))
            except LiteError as err:  # e.g. a symbolic length of 1 is too short for the model's convolutions
                self.int8_form = "as stored"
                return {"chosen": "int8", "why": f"not measured: random inputs did not run ({type(err).__name__}: {err})"}
            decision["reused"] = False
            if decision.get("settled", True):
                int8_choice.record(self._decision_path(), decision)
        if decision["chosen"] == "float":
            segment.runner = floated
        else:
            self.int8_form = "as stored"
        return decision

    def _outputs_of(self, session: sessions.Session) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        names = self.output_names
        return lambda feeds: dict(zip(names, session.run_arrays(names, feeds, quiet=True)))

    def _on_empty(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if self._empty_runner is None:
            self._empty_runner = self._numpy_reference()
        return self._empty_runner({name: host_array(value) for name, value in feeds.items()})

    def _numpy_reference(self) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        from lite.engines.numpy_engine import NumpyEngine

        return NumpyEngine(self.model, self.custom_ops).run

    def _decision_path(self) -> Path | None:
        identity = self.identity("int8 or float form", "either")
        if identity is None or self.config.cache_dir is None:
            return None
        return int8_choice.decision_path(self.config.cache_dir, f"{identity}|threads={self.config.threads}")

    def _direct_session(self) -> sessions.Session | None:
        """The session that runs the whole graph on the CPU, when numpy feeds can go to it as they
        are (no text inputs to decode): :meth:`run` then skips the segment machinery."""
        if self.name != "cpu" or len(self.segments) != 1 or not self.segments[0].on_ort:
            return None
        runner = self.segments[0].runner
        graph = self.model.main
        if not isinstance(runner, sessions.Session) or any(graph.tensors[i].dtype == DataType.STRING
                                                            for i in graph.inputs):
            return None
        return runner

    def _nodes_named(self, missing: sessions.MissingKernel) -> list[ir.Node]:
        """The main-graph nodes ONNX Runtime's error is about: one by name (unnamed nodes are
        lowered as OpType_i), or every node of an op type it does not know at all."""
        nodes = self.model.main.nodes
        if missing.node_name is None:
            return [n for n in nodes if n.op_type == missing.op_type]
        return [n for i, n in enumerate(nodes) if node_name(n, i) == missing.node_name]

    def _supported(self, node: ir.Node) -> bool:
        domain = normalize_domain(node.domain)
        if self.custom_ops is not None and self.custom_ops.select(node.op_type, domain, 1 << 30) is not None:
            return False
        # Within ONNX Runtime's domains (any domain, with custom op libraries registered), a node
        # it cannot run surfaces as MissingKernel when the session is built, and moves to the
        # numpy engine then.
        return domain in _ORT_DOMAINS or bool(self.config.custom_op_libraries)

    def _build(self, on_numpy: set[int]) -> list[Segment]:
        graph = self.model.main
        segments = []
        for part in split(self.model, lambda node: id(node) not in on_numpy):
            segment = Segment(part.on_engine, part.nodes, part.inputs, part.outputs)
            segment.input_names = tuple(graph.tensors[i].name for i in segment.inputs)
            segment.output_names = tuple(graph.tensors[i].name for i in segment.outputs)
            segments.append(segment)
        config = None
        if self._on_device(segments):
            for segment in segments:
                segment.on_device_kernels = not segment.on_ort and self._device_kernels(segment.nodes) is not None
            if any(s.on_device_kernels for s in segments):
                if self.stream is None:
                    self.stream = CudaStream(self.config.device_id)
                if self.name == "cuda":  # ONNX Runtime's segments queue their work on the kernels' stream
                    config = dataclasses.replace(self.plain_config, compute_stream=self.stream.handle)
        for index, segment in enumerate(segments):
            if segment.on_device_kernels:
                segment.runner = KernelSteps(self.ort, graph, segment.nodes, self._device_kernels(segment.nodes),
                                             self.config.device_id, self.stream)
            else:
                segment.runner = self._runner(segment, index, len(segments), config)
        return segments

    def _on_device(self, segments: list[Segment]) -> bool:
        """Whether values may stay on the GPU between segments: on a GPU device, with no text
        tensor crossing from one segment to the next (ONNX Runtime keeps strings on the host)."""
        if self.name == "cpu" or len(segments) == 1 and segments[0].on_ort:
            return False
        tensors = self.model.main.tensors
        return all(tensors[i].dtype != DataType.STRING for s in segments for i in (*s.inputs, *s.outputs))

    def _device_kernels(self, nodes: list[ir.Node]) -> list[Any] | None:
        from lite.custom_ops import device_kernels

        return device_kernels(self.custom_ops, nodes)

    def _runner(self, segment: Segment, index: int, count: int, config: sessions.SessionConfig | None = None):
        graph = self.model.main
        config = config or self.plain_config
        if segment.on_ort:
            inputs = graph.inputs if count == 1 else segment.inputs
            outputs = graph.outputs if count == 1 else segment.outputs
            name = graph.name if count == 1 else f"{graph.name}/segment{index}"

            position = {id(n): i for i, n in enumerate(graph.nodes)}
            # The exact part of the graph: which nodes, and the tensors at its boundary.
            part = f"{name}|{[position[id(n)] for n in segment.nodes]}|{list(inputs)}|{list(outputs)}"

            def build(input_types: dict[str, DataType] | None = None) -> sessions.Session:
                typed = sorted((k, int(v)) for k, v in (input_types or {}).items())
                return sessions.create(self.ort, lambda: self._lower(segment.nodes, inputs, outputs, name, input_types),
                                       config, self.identity(f"{part}|{typed}", self.int8_form))

            if any(graph.tensors[i].dtype == DataType.UNDEFINED for i in inputs):
                return TypedOnFirstRun(build)
            return build()
        return numpy_part(self.model, Part(False, segment.nodes, segment.inputs, segment.outputs), index,
                          self.custom_ops)

    def whole_graph_session(self, threads: int, int8_form: str | None = None) -> sessions.Session:
        """A CPU session of the whole graph (one segment) on ``threads`` intra-op threads, in
        ``int8_form`` ("as stored" or the float form; default: the engine's): what the load-time
        choices (thread_choice.py) time and keep."""
        kept = self.int8_form
        self.int8_form = int8_form or kept  # the form _lower builds and identity() names
        try:
            return self._runner(self.segments[0], 0, 1, dataclasses.replace(self.plain_config, threads=threads))
        finally:
            self.int8_form = kept

    def _half_compute(self) -> bool:
        """On GPUs, compute in float16 when asked, or (auto) when the model stores float16 weights."""
        wanted = self.config.precision
        if self.name == "cpu" or wanted == "fp32":
            return False
        return wanted == "fp16" or has_half_weights(self.model)

    def _lower(self, nodes, inputs, outputs, name: str, input_types=None):
        """The ONNX model ONNX Runtime runs for these nodes (imports onnx: only on a cache miss)."""
        from lite.engines.ort.half import to_half_compute
        from lite.format.onnx.lower import lower_nodes

        lowered = lower_nodes(self.model, nodes, inputs, outputs, name=name, input_types=input_types)
        if self.int8_form == _FLOAT_FORM:  # decided for this model before (int8_choice.py), so it has one
            from lite.engines.ort.dequantized import float_form

            lowered = float_form(lowered)
            if isinstance(lowered, str):
                raise UnsupportedOpError(f"the float form of this int8 model: {lowered}")
        if self.name == "cpu":
            from lite.engines.ort import rewrites

            rewrites.apply(lowered)
        if self.unsigned_weights:
            from lite.engines.ort.unsigned import unsigned_weights

            lowered = unsigned_weights(lowered)
        return to_half_compute(lowered) if self.compute_precision == "fp16" else lowered

    def identity(self, part: str, form: str = "as stored") -> str | None:
        """Names a lowered part of the model without lowering it, when the model came from a file."""
        if self.config.weights_identity is None:
            return None
        weights = "uint8 weights" if self.unsigned_weights else "weights as stored"
        return (f"{self.config.weights_identity}|{lowering_fingerprint(*_REWRITES)}|{self.compute_precision}|{weights}|"
                f"{form}|{part}")

    def _gpu_runner(self) -> CudaRunner | None:
        """IOBinding (and CUDA graph) execution when the whole graph is one ONNX Runtime session."""
        if len(self.segments) != 1 or not isinstance(self.segments[0].runner, sessions.Session):
            return None
        stream = torch_stream(self.config.device_id) if self.config.cuda_graph else None

        def make(fresh: bool) -> tuple[sessions.Session, sessions.Session | None]:
            # Fresh sessions are for a second thread, where cuDNN's runtime fusion failed (see
            # CudaRunner.run): they go without it.
            config = dataclasses.replace(self.config, fuse_conv_bias=False) if fresh else self.config
            if fresh:
                plain = self._runner(self.segments[0], 0, 1, dataclasses.replace(config, cuda_graph=False))
            else:
                plain = self.segments[0].runner
            if not self.config.cuda_graph:
                return plain, None
            main = self.model.main
            config = config if stream is None else dataclasses.replace(config, compute_stream=stream.cuda_stream)
            try:
                graphed = sessions.create(self.ort, lambda: self._lower(main.nodes, main.inputs, main.outputs, main.name),
                                          config, self.identity("whole graph, CUDA graph"))
            except Exception as err:  # e.g. some nodes fell back to the CPU provider: no capture possible
                self.cuda_graph_declined = f"{type(err).__name__}: {err}"
                return plain, None
            return plain, graphed

        plain, graphed = make(fresh=False)
        return CudaRunner(self.ort, plain, graphed, self.config.device_id, stream if graphed is not None else None,
                          rebuild=lambda: make(fresh=True))

    def bind(self, feeds: Mapping[str, Any]):
        """Fixed buffers on a CUDA graph (``Model.bind``); None: the generic binding serves."""
        return self.gpu.bind(dict(feeds)) if self.gpu is not None else None

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        if self.recurrent and has_empty_axis(feeds):  # ONNX Runtime would end the process (empty_inputs.py)
            return self._on_empty(feeds)
        direct = self.direct
        if (direct is not None and len(feeds) == len(direct.input_names)
                and all(type(value) is np.ndarray for value in feeds.values())):
            return dict(zip(self.output_names, direct.run_arrays(self.output_names, feeds)))
        if self.gpu is not None:
            return self.gpu.run(dict(feeds))
        if any(s.on_device_kernels for s in self.segments):  # no text tensors then (see _on_device)
            try:
                return run_on_device(self.segments, feeds, self.output_names, self.ort, self.stream,
                                     self.config.device_id, shares_stream=self.name == "cuda")
            except sessions.MissingKernel as missing:
                # Only a segment typed on first run can get here; its node joins the numpy engine.
                self._move_to_numpy(missing)
                return self.run(feeds)
        feeds = {name: host_array(value) for name, value in feeds.items()}
        feeds = {name: as_text(name, value) if getattr(value, "dtype", None) == object else value
                 for name, value in feeds.items()}
        if len(self.segments) == 1:
            return self.segments[0].run(feeds)
        try:
            return run_in_order(self.segments, feeds, self.output_names)
        except sessions.MissingKernel as missing:
            # Only a segment typed on first run can get here; its node joins the numpy engine.
            self._move_to_numpy(missing)
            return self.run(feeds)

    def _move_to_numpy(self, missing: sessions.MissingKernel) -> None:
        with self._rebuild_lock:
            moved = {id(n) for n in self._nodes_named(missing)} - self._on_numpy
            if not moved:
                raise UnsupportedOpError(str(missing)) from missing
            self._on_numpy |= moved
            self.segments = self._build(self._on_numpy)
            self.numpy_nodes = sum(len(s.nodes) for s in self.segments if not s.on_ort and not s.on_device_kernels)
            self.direct = self._direct_session()

    def describe(self) -> list[dict[str, Any]]:
        """The partition: one entry per segment (engine, node count, first and last op)."""
        return [{"engine": "onnxruntime" if s.on_ort else "cuda-kernel" if s.on_device_kernels else "numpy",
                 "nodes": len(s.nodes),
                 "ops": sorted({n.op_type for n in s.nodes})} for s in self.segments]


def available_devices() -> list[str]:
    """Devices the installed ONNX Runtime offers ("cuda", "tensorrt", "cpu"), best first."""
    try:
        ort = sessions.import_onnxruntime("cpu")
    except EngineUnavailableError:
        return []
    providers = ort.get_available_providers()
    devices = []
    if "TensorrtExecutionProvider" in providers:
        devices.append("tensorrt")
    if "CUDAExecutionProvider" in providers:
        devices.append("cuda")
    devices.append("cpu")
    return devices

