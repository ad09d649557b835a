"""The OpenVINO engine: the lowered ONNX model compiled by OpenVINO's CPU plugin.

The .lite graph is lowered to ONNX exactly as for ONNX Runtime (:mod:`lite.format.onnx.lower`),
written once to the cache (see :mod:`lite.engines.openvino.cache`) and compiled with
``Core.compile_model(path)``. With OpenVINO's ``CACHE_DIR`` set, a later process that compiles
the same path with the same settings imports the compiled blob instead of reading and
compiling the model again, so a warm start needs neither onnx nor the lowering.

Precision policy (``precision=``):

- ``"exact"``: ``INFERENCE_PRECISION_HINT = f32``; float layers compute in float32, as the
  numpy engine does (OpenVINO's own default on CPUs with bf16 units is bf16).
- ``"bf16"``: ``INFERENCE_PRECISION_HINT = bf16`` where the CPU reports bf16 units
  (``OPTIMIZATION_CAPABILITIES`` contains ``BF16``: AVX-512 BF16, AMX); elsewhere float32, and
  :attr:`OpenVinoEngine.compute_precision` says so.
- int8: a model quantized to QDQ form (QuantizeLinear/DequantizeLinear around the layers, as
  ``lite convert --quant int8`` writes it) is run in int8 by OpenVINO's low-precision
  transformations under either policy; the float parts follow the policy.

Nodes OpenVINO cannot run (custom ops, domains it does not read, sequences, strings) raise
:class:`OpenVinoRejected` before anything is compiled; ``engine="auto"`` then picks another
engine, ``engine="openvino"`` reports the error.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lite.engines.openvino import cache
from lite.errors import EngineUnavailableError, KernelError, LiteError, UnsupportedOpError
from lite.format import ir
from lite.format.dtypes import DataType
from lite.ops.registry import normalize_domain

PRECISIONS = ("exact", "bf16")
_HINTS = {"exact": "f32", "bf16": "bf16"}
# Domains OpenVINO's ONNX frontend reads (it implements part of com.microsoft).
_DOMAINS = {"", "ai.onnx", "com.microsoft"}


class OpenVinoRejected(UnsupportedOpError):
    """OpenVINO cannot run this model (an op, a domain or a value type it does not support)."""


def import_openvino():
    try:
        import openvino
    except ImportError as err:
        raise EngineUnavailableError(
            "engine 'openvino' needs OpenVINO: pip install 'lite-toolchain[openvino]'"
        ) from err
    return openvino


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:300]


def check_supported(model: ir.Model, custom_ops: Any = None) -> None:
    """Raise :class:`OpenVinoRejected` naming what OpenVINO cannot run, before compiling anything."""
    graph = model.main
    for index in (*graph.inputs, *graph.outputs):
        tensor = graph.tensors[index]
        if tensor.dtype == DataType.STRING:
            raise OpenVinoRejected(f"tensor {tensor.name!r} holds strings, which OpenVINO does not run; "
                                   "use engine='numpy' or engine='onnxruntime'")
    try:
        described = json.loads(model.metadata.get(ir.VALUE_TYPES_KEY, "{}"))
    except ValueError:
        described = {}
    if any(described.values()):
        names = sorted(name for values in described.values() for name in values)[:5]
        raise OpenVinoRejected(f"values {names} are sequences or optionals, which OpenVINO does not run; "
                               "use engine='onnxruntime' or engine='numpy'")
    for body in model.graphs:
        for position, node in enumerate(body.nodes):
            label = f"node {node.name or position!r} ({node.domain or 'ai.onnx'}::{node.op_type})"
            if custom_ops is not None and custom_ops.select(node.op_type, normalize_domain(node.domain), 1 << 30):
                raise OpenVinoRejected(f"{label} is a custom op with a Python kernel; OpenVINO cannot call it "
                                       "(the numpy and onnxruntime engines can)")
            if node.domain not in _DOMAINS:
                raise OpenVinoRejected(f"{label}: OpenVINO does not read domain {node.domain!r}")


class OpenVinoEngine:
    """Runs a whole model with OpenVINO on the CPU. Thread-safe: one infer request per caller."""

    name = "openvino"
    kind = "openvino"
    placement = "cpu"
    on_gpu = False

    def __init__(self, model: ir.Model, *, precision: str = "exact", threads: int | None = None,
                 cache_dir: str | Path | None = None, weights_identity: str | None = None,
                 custom_ops: Any = None) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"OpenVINO precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be a positive integer or None; got {threads!r}")
        check_supported(model, custom_ops)
        ov = import_openvino()
        self.model = model
        self.precision = precision
        self.version = ov.get_version()
        self.core = ov.Core()
        self._tensor = ov.Tensor
        capabilities = self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        self.bf16_units = "BF16" in capabilities
        # bf16 where the CPU has the units; float32 (more exact than asked) elsewhere.
        self.compute_precision = "bf16" if precision == "bf16" and self.bf16_units else "f32"
        config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": self.compute_precision, "PERFORMANCE_HINT": "LATENCY"}
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = threads
        self.config = config
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        graph = model.main
        self.input_names = [graph.tensors[i].name for i in graph.inputs]
        self.output_names = [graph.tensors[i].name for i in graph.outputs]
        self.from_cache = False
        self.compiled = self._compile(weights_identity)
        ports = [port.get_names() for port in self.compiled.inputs]
        self._input_order = [self._port_of(name, ports, "input") for name in self.input_names]
        ports = [port.get_names() for port in self.compiled.outputs]
        self._output_order = [self._port_of(name, ports, "output") for name in self.output_names]
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put(self.compiled.create_infer_request())

    def _port_of(self, name: str, ports: list[set[str]], kind: str) -> int:
        for index, names in enumerate(ports):
            if name in names:
                return index
        raise OpenVinoRejected(f"OpenVINO's compiled model has no {kind} named {name!r} (it has {ports})")

    def _compile(self, weights_identity: str | None):
        try:
            if self.cache_dir is None:
                return self.core.compile_model(cache.read_in_memory(self.core, self.model), "CPU", self.config)
            entry = cache.model_entry(self.model, self.cache_dir, weights_identity, self.version)
            self.from_cache = entry.existed
            compiled_dir = cache.compiled_dir(self.cache_dir, self.version)
            return self.core.compile_model(str(entry.path), "CPU", {**self.config, "CACHE_DIR": str(compiled_dir)})
        except LiteError:
            raise
        except RuntimeError as err:  # OpenVINO's refusals are untyped RuntimeErrors: name them
            raise OpenVinoRejected(f"OpenVINO {self.version} cannot compile this model: {_first_line(err)}") from err

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        try:
            request = self._requests.get_nowait()
        except queue.Empty:  # every request is busy in another thread: one more
            request = self.compiled.create_infer_request()
        try:
            # Tensors over the numpy buffers (no copy), then the bare infer(): about 20 µs a call
            # less than infer(inputs), whose Python-side dispatch re-inspects the inputs each time.
            for name, port in zip(self.input_names, self._input_order):
                array = np.ascontiguousarray(feeds[name])
                request.set_input_tensor(port, self._tensor(array, shared_memory=True))
            request.infer()
            return {name: request.get_output_tensor(port).data.copy()
                    for name, port in zip(self.output_names, self._output_order)}
        except RuntimeError as err:
            raise KernelError(f"OpenVINO failed to run the model: {_first_line(err)}") from err
        finally:
            self._requests.put(request)

    def describe(self) -> dict[str, Any]:
        return {"engine": "openvino", "version": self.version, "precision": self.precision,
                "compute_precision": self.compute_precision, "bf16_units": self.bf16_units}
