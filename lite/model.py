"""``lite.Model``: load a .lite file and run it, the API for applications.

    import lite
    model = lite.Model.load("model.lite")          # device="auto": the best engine installed
    outputs = model.predict({"input": batch})      # dict name -> np.ndarray
    logits = model(batch)                          # single-input models
"""

from __future__ import annotations

import importlib.util
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lite.binding import Binding, PredictBinding
from lite.custom_ops import CustomOps
from lite.engines.base import DEVICES
from lite.errors import (
    AutotuneSkippedWarning,
    EngineFallbackWarning,
    InvalidInputError,
    ModelFormatError,
    SampleInputError,
    UnsupportedOpError,
)
from lite.format import ir
from lite.format import load as load_model
from lite.format.dtypes import DataType
from lite.input_checks import check_input, is_plain, plain_checks, symbol_disagreement
from lite.signature import TensorSpec, file_identity


class Model:
    """A loaded model bound to an engine. Thread-safe: ``predict`` may be called concurrently."""

    def __init__(self, model: ir.Model, engine: Any, source: str = "<memory>") -> None:
        self.ir = model
        self.engine = engine
        self.source = source
        graph = model.main
        kinds = _value_kinds(model)
        self.inputs = [TensorSpec.of(graph.tensors[i], kinds.get(graph.tensors[i].name, "tensor")) for i in graph.inputs]
        self.outputs = [TensorSpec.of(graph.tensors[i], kinds.get(graph.tensors[i].name, "tensor")) for i in graph.outputs]
        self._plain_checks = plain_checks(self.inputs)

    @classmethod
    def load(cls, source: str | os.PathLike | bytes | bytearray | memoryview, device: str = "auto",
             threads: int | None = None, custom_ops: CustomOps | None = None, *, engine: str | None = None,
             batch_sizes: Sequence[int] | None = None, memory_map: bool = True, check_weights: bool = False,
             **options: Any) -> Model:
        """Load and verify a .lite model and bind it to an engine.

        A path is memory-mapped: weights are views of the file, never copied. Such a file must
        not be rewritten in place while the model is loaded (rename a new file over it instead);
        ``memory_map=False`` reads it into private memory, after which the file may change freely.
        ``check_weights=True`` also compares the weights with the checksum written with the file
        (a :class:`ModelFormatError` when a byte changed; it reads every weight once).

        ``device``: ``"numpy"`` (the edge engine, always available), ``"cpu"`` / ``"cuda"`` /
        ``"tensorrt"`` (ONNX Runtime execution providers, when installed) or ``"auto"`` (CUDA if
        available, else ONNX Runtime CPU if installed, else numpy).
        ``custom_ops``: kernels for custom nodes (see :class:`lite.CustomOps`); on ONNX Runtime
        devices those nodes run on the numpy engine, the rest of the graph on ONNX Runtime.
        ``options`` (ONNX Runtime devices): ``optimization`` ("all", "extended", "basic",
        "disable"), ``cache_dir`` (None disables the session cache), ``device_id``,
        ``gpu_mem_limit``, ``cudnn_conv_algo_search``, ``prefer_nhwc``, ``cuda_graph``,
        ``fuse_conv_bias``, ``tf32``, ``cuda_options`` (more CUDA provider options, a dict), ``precision``,
        ``int8_compute`` (int8 models on the CPU: ``"auto"``, the default, measures ONNX Runtime's
        int8 kernels against the model's float form on dequantized weights at load and keeps the
        faster, ``model.engine.decision`` says which and why; ``"int8"`` or ``"float"`` choose),
        ``spinning`` (CPU threads: ``"run"``, the default, spin for work only while a run is in
        progress; ``"always"`` keeps ONNX Runtime's own behaviour of spinning on after it; ``"never"``);
        see :class:`lite.engines.ort.sessions.SessionConfig`.

        ``engine`` (orthogonal to ``device``, which then says where the engine runs; ``"auto"``
        lets the engine choose): None (the default) binds the engine ``device`` names, as above;
        ``"numpy"``, ``"onnxruntime"``, ``"openvino"`` (optional extra ``openvino``; CPU) or any
        other name of :data:`lite.engines.ENGINES` binds that engine and raises a typed error
        (:class:`lite.EngineUnavailableError`, :class:`lite.UnsupportedOpError`) when it is not
        installed or cannot run the model; ``"auto"`` measures every engine that can run the
        model on ``device``, checks each against the numpy engine on random inputs, and binds
        the fastest per batch size of ``batch_sizes`` (default ``(1,)``); a batch is served by
        the engine of the smallest declared size not below it. The decision is recorded under
        ``cache_dir`` (``<cache_dir>/autotune/``) and reused by later loads while the model file,
        the engines' versions and the hardware are unchanged; ``retune=True`` measures again.
        ``model.engine.decision`` holds the record (times, errors, why others were not chosen).
        The engines are measured on random inputs sized as the converter recorded, else as the
        graph suggests (:mod:`lite.sample_inputs`); ``input_shapes`` (``{name: shape}``) gives
        them where neither fits. When no such inputs run the model, ``"auto"`` warns
        (:class:`lite.errors.AutotuneSkippedWarning`, saying why and which shapes to give) and
        binds the engine ``engine=None`` would.
        With an ``engine``, ``precision`` is a policy: ``"exact"`` (float32 arithmetic, as the
        numpy engine computes), ``"fp16"`` or ``"bf16"`` (the least precise arithmetic an engine
        may use; GPU engines compute in float16 under ``"fp16"``, OpenVINO in bf16 on CPUs with
        bf16 units under ``"bf16"``); the default is the precision the model was converted for:
        ``"fp16"`` for a model that stores float16 weights (``lite convert --fp16``), else ``"exact"``;
        int8 models run in int8 from their QDQ form under any policy. With ``engine="auto"``
        only ``precision``, ``cache_dir``, ``retune`` and ``input_shapes`` apply; with one engine, that engine's
        options (e.g. the ONNX Runtime ones above for ``"onnxruntime"``).
        """
        if device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {device!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None; got {threads!r}")
        if batch_sizes is not None and engine != "auto":
            raise TypeError("batch_sizes applies to engine='auto' (it declares the batch sizes to tune for)")
        in_memory = isinstance(source, (bytes, bytearray, memoryview))
        identity = None if in_memory else file_identity(source)
        model = (load_model(source, check_weights=check_weights) if in_memory
                 else load_model(source, memory_map=memory_map, check_weights=check_weights))
        if not in_memory and file_identity(source) != identity:
            # Caches are keyed on the identity: never file these weights under another file's name.
            raise ModelFormatError(f"{source} changed while it was loaded; load it again once it is written")
        if engine is None:
            bound = _engine_for(model, device, threads, custom_ops, options, identity)
        else:
            bound = _named_engine(model, engine, source, device, threads, custom_ops, options, identity, batch_sizes)
        return cls(model, bound, "<bytes>" if in_memory else str(source))

    @property
    def metadata(self) -> dict[str, str]:
        return self.ir.metadata

    @property
    def device(self) -> str:
        return self.engine.name

    @property
    def on_gpu(self) -> bool:
        """Whether the engine computes on a GPU (its ``placement`` is cuda or tensorrt)."""
        return self.engine.on_gpu

    def predict(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run the model. ``inputs`` maps every input name to an array (lists are converted)."""
        feeds = self._validate(inputs)
        try:
            return self.engine.run(feeds)
        except Exception as err:
            disagreement = symbol_disagreement(self.inputs, feeds)
            if disagreement is None or isinstance(err, InvalidInputError):
                raise
            raise InvalidInputError(f"{err}; the inputs disagree on a dimension the model names alike: "
                                    f"{disagreement}") from err

    def bind(self, inputs: Mapping[str, Any]) -> Binding:
        """Fixed buffers for repeated calls with these inputs' shapes and types (as ONNX Runtime's
        IOBinding): write each call's values into ``binding.inputs``, call ``binding.run()``, read
        ``binding.outputs`` (overwritten by the next run). On CUDA with CUDA graphs a run is the
        graph's replay alone; elsewhere it is ``predict`` on the buffers. See lite/binding.py."""
        feeds = self._validate(inputs)
        engine_bind = getattr(self.engine, "bind", None)
        binding = engine_bind(feeds) if engine_bind is not None else None
        return binding if binding is not None else PredictBinding(feeds, self.predict)

    def __call__(self, x: Any) -> np.ndarray | dict[str, np.ndarray]:
        """Run a single-input model on ``x``; returns the output (or a dict when there are several)."""
        if len(self.inputs) != 1:
            names = ", ".join(spec.name for spec in self.inputs)
            raise InvalidInputError(f"model takes {len(self.inputs)} inputs ({names}); call predict({{name: array}})")
        outputs = self.predict({self.inputs[0].name: x})
        return next(iter(outputs.values())) if len(outputs) == 1 else outputs

    def __repr__(self) -> str:
        def fmt(specs: list[TensorSpec]) -> str:
            return ", ".join(f"{s.name}: {s.dtype}{list(s.shape) if s.shape is not None else '[?]'}" for s in specs)

        return f"lite.Model({self.source!r}, device={self.device!r}, inputs=[{fmt(self.inputs)}], outputs=[{fmt(self.outputs)}])"

    def _validate(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        checks = self._plain_checks
        if checks is not None and type(inputs) is dict and is_plain(checks, inputs):
            # The common call (numpy arrays of the declared types and shapes) in a few comparisons;
            # ONNX Runtime runs small models in 0.1-0.2 ms, where each microsecond here is 1%.
            # Anything else, errors included, takes the full path below.
            return dict(inputs)
        if type(inputs) is not dict and not isinstance(inputs, Mapping):
            raise InvalidInputError(
                f"predict takes a dict of input name -> array, got {type(inputs).__name__}; "
                f"inputs are: {', '.join(s.name for s in self.inputs)}"
            )
        specs = self.inputs
        # Names are unique: as many names as inputs, each present, is an exact match.
        if len(inputs) != len(specs) or not all(spec.name in inputs for spec in specs):
            expected = {spec.name for spec in specs}
            missing = [spec.name for spec in specs if spec.name not in inputs]
            extra = sorted(str(name) for name in inputs if name not in expected)
            parts = []
            if missing:
                parts.append(f"missing {', '.join(map(repr, missing))}")
            if extra:
                parts.append(f"unknown {', '.join(map(repr, extra))}")
            raise InvalidInputError(f"inputs do not match the model: {'; '.join(parts)} "
                                    f"(the model takes {', '.join(map(repr, [s.name for s in specs]))})")
        return {spec.name: check_input(spec, inputs[spec.name]) for spec in specs}


def _value_kinds(model: ir.Model) -> dict[str, str]:
    """Main-graph values of ONNX sequence or optional type, from the ``lite.value_types`` metadata."""
    try:
        described = json.loads(model.metadata.get(ir.VALUE_TYPES_KEY, "{}")).get("0", {})
    except (ValueError, AttributeError):
        return {}
    kinds = {}
    for name, text in described.items():
        if isinstance(text, str):
            kinds[name] = "sequence" if text.startswith("seq(") else "optional" if text.startswith("optional(") else "tensor"
    return kinds


def _named_engine(model: ir.Model, engine: str, source: Any, device: str, threads: int | None,
                  custom_ops: CustomOps | None, options: dict[str, Any], identity: str | None,
                  batch_sizes: Sequence[int] | None):
    """``engine=`` given: one engine of :data:`lite.engines.ENGINES`, or the autotuned choice."""
    from lite.engines import EngineRequest, create_engine, default_cache_dir

    options = dict(options)
    precision = options.pop("precision", None)
    cache_dir = options.pop("cache_dir", default_cache_dir())
    where = "cpu" if device == "numpy" else device
    if engine != "auto":
        if device == "numpy" and engine != "numpy":
            raise ValueError(f"device='numpy' is the numpy engine; engine={engine!r} needs device 'auto' or one it runs on")
        if engine == "onnxruntime":
            options.setdefault("int8_compute", "auto")  # as for device="cpu"
        request = EngineRequest(device=where, threads=threads, precision=precision, custom_ops=custom_ops,
                                identity=identity, cache_dir=cache_dir, options=options)
        return create_engine(engine, model, request)
    from lite.autotune import model_identity, tune

    retune = bool(options.pop("retune", False))
    input_shapes = options.pop("input_shapes", None)
    if options:
        raise TypeError(f"options {', '.join(sorted(options))} do not apply to engine='auto' (it takes precision, "
                        "cache_dir, retune and input_shapes); name an engine to pass engine options")
    try:
        return tune(model, identity=identity or model_identity(source), device=device, threads=threads,
                    precision=precision, batch_sizes=batch_sizes, custom_ops=custom_ops, cache_dir=cache_dir,
                    retune=retune, input_shapes=input_shapes)
    except SampleInputError as err:
        # Autotuning is an optimization: a model it cannot measure still runs, on the default engine.
        warnings.warn(AutotuneSkippedWarning(str(err)), stacklevel=3)
        return _engine_for(model, device, threads, custom_ops, {}, identity)


def _engine_for(model: ir.Model, device: str, threads: int | None, custom_ops: CustomOps | None,
                options: dict[str, Any], identity: str | None):
    if device == "auto":
        device = _best_device(model)
        if device == "numpy" and _ort_device() is None:
            # Without ONNX Runtime, "auto" is the numpy engine: ONNX Runtime's options (cache_dir,
            # precision, ...) do not apply, as when ONNX Runtime refuses a model below, and code
            # written for any machine must not fail on an edge install. Misspelt ones still fail.
            _check_onnxruntime_options(options)
            options = {}
        if device == "numpy" and _ort_device() is not None:
            try:
                return _engine_for(model, "numpy", threads, custom_ops, {}, identity)
            except UnsupportedOpError:
                # A string model (kept on the numpy engine for its bytes) with a node only ONNX
                # Runtime runs, such as scikit-learn's text pipelines' com.microsoft Tokenizer.
                device = _ort_device()
        if device != "numpy":
            from lite.engines.ort.sessions import OrtRejected

            try:
                return _engine_for(model, device, threads, custom_ops, options, identity)
            except OrtRejected as err:
                # "auto" means the best engine that runs the model: the numpy engine runs them all.
                # Said, since it may be far slower (an ONNX Runtime too old for the model, say).
                warnings.warn(EngineFallbackWarning(str(err)), stacklevel=4)
                return _engine_for(model, "numpy", threads, custom_ops, {}, identity)
    from lite.engines import EngineRequest, create_engine, default_cache_dir

    if device == "numpy":
        if options:
            raise TypeError(f"options {', '.join(sorted(options))} apply to ONNX Runtime devices, not to device='numpy'")
        return create_engine("numpy", model, EngineRequest(device="cpu", threads=threads, custom_ops=custom_ops))
    # A device of ONNX Runtime's: its options (precision among them, in ONNX Runtime's terms) pass through.
    options = dict(options)
    options.setdefault("int8_compute", "auto")  # int8 models: int8 kernels or the float form, the faster here
    cache_dir = options.pop("cache_dir", default_cache_dir())
    request = EngineRequest(device=device, threads=threads, custom_ops=custom_ops, identity=identity,
                            cache_dir=cache_dir, options=options)
    return create_engine("onnxruntime", model, request)


def _check_onnxruntime_options(options: dict[str, Any]) -> None:
    """TypeError naming ``options`` that no ONNX Runtime device takes."""
    import dataclasses

    from lite.engines.ort.sessions import SessionConfig

    known = {f.name for f in dataclasses.fields(SessionConfig)} | {"cache_dir"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; valid options: {', '.join(sorted(known))}")


def _best_device(model: ir.Model) -> str:
    """CUDA when ONNX Runtime offers it, else ONNX Runtime's CPU provider, else the numpy engine.

    Models that take or return strings stay on the numpy engine, which carries any bytes;
    ONNX Runtime's Python binding holds strings as UTF-8 text only.
    """
    graph = model.main
    if any(graph.tensors[i].dtype == DataType.STRING for i in (*graph.inputs, *graph.outputs)):
        return "numpy"
    return _ort_device() or "numpy"


def _ort_device() -> str | None:
    """ONNX Runtime's best device here ("cuda", "cpu"), None where it or onnx is missing."""
    try:
        import onnxruntime
    except ImportError:
        return None
    if importlib.util.find_spec("onnx") is None:  # the ONNX Runtime engine writes its models with onnx
        return None
    available = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" in available:
        return "cuda"
    return "cpu" if "CPUExecutionProvider" in available else None