"""One served model version: signature, request validation, scheduling and statistics."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import lite

from .batch_merge import pinned_allocator
from .batching import DirectScheduler, DynamicBatcher, Scheduled, Tensors
from .config import ModelConfig, check_renames
from .datatypes import datatype_of
from .errors import (
    ConfigError,
    InferenceFailedError,
    InvalidRequestError,
    ModelLoadError,
    ModelNotReadyError,
    ResourceExhaustedError,
    ServingError,
)
from .limits import RequestLimits
from .metrics import Metrics, no_pending
from .processing import ImagePreprocessing, classify, labels_of, tensor_metadata
from .request_checks import RequestSignature
from .statistics import ExecutionTimes, ModelStatistics
from .types import InferenceRequest, InferenceResponse, RequestedOutput, TensorInfo
from .warmup import check_batch_axis, complete_outputs, unknown_sizes, zero_inputs

log = logging.getLogger("serving.model")
PLATFORM = "lite"


class ServedModel:
    """A loaded version of a model. Create with :meth:`load` (blocking: call it in a thread),
    then :meth:`start` on the event loop; :meth:`close` drains and stops it."""

    def __init__(self, name: str, version: int, model: lite.Model, config: ModelConfig, *,
                 device: str, instances: int, max_queue_size: int, metrics: Metrics, inline_us: int = 0,
                 stamp: tuple = (), executor: ThreadPoolExecutor | None = None) -> None:
        """``executor``: runs the executions (default: ``instances`` threads)."""
        self.name = name
        self.version = str(version)
        self.config = config
        self.device = device  # the engine the runtime chose: numpy, cpu, cuda or tensorrt
        self.on_gpu = model.on_gpu  # the engine's typed placement, not a parse of its name
        self.instances = instances
        self.max_queue_size = max_queue_size
        self.stamp = stamp  # what this version was loaded from (file, mtime, size, config)
        self.state = "LOADING"
        self.stats = ModelStatistics(name, self.version)
        self._model = model
        self._metrics = metrics.for_model(name, self.version)
        self._metrics.pending = self._pending_requests
        self._preprocess = (
            ImagePreprocessing.from_model(model.metadata, model.inputs, config.max_batch_size)
            if config.preprocessing == "image" else None
        )
        self._served_to_model = {config.input_names.get(s.name, s.name): s.name for s in model.inputs}
        self._model_to_served = {s.name: config.output_names.get(s.name, s.name) for s in model.outputs}
        self._renames = any(a != b for a, b in (*self._served_to_model.items(), *self._model_to_served.items()))
        self._labels = {served: labels_of(model.metadata, name) for name, served in self._model_to_served.items()}
        served_names = {**{m: s for s, m in self._served_to_model.items()}, **self._model_to_served}
        self.tensor_metadata = tensor_metadata(model.metadata, served_names)  # for ModelConfig's parameters
        self.inputs = [self._input_info(spec) for spec in model.inputs]
        self.outputs = [self._info(self._model_to_served[s.name], s)
                        for s in complete_outputs(model, config.max_batch_size > 0)]
        images = None if self._preprocess is None else config.input_names.get(self._preprocess.input_name,
                                                                                self._preprocess.input_name)
        self._signature = RequestSignature(name, self.version, {info.name: info for info in self.inputs},
                                           frozenset(info.name for info in self.outputs), config.max_batch_size,
                                           images, self._preprocess)
        self._check_batching()
        self._executor = executor or ThreadPoolExecutor(instances, thread_name_prefix=f"{name}-v{version}")
        self.pad_to: tuple[int, ...] = ()  # the batch sizes merged batches are padded up to
        self._merge_executor: ThreadPoolExecutor | None = None
        if config.dynamic_batching is not None:
            pad = config.dynamic_batching.pad_batches
            if pad or (pad is None and self.on_gpu):
                self.pad_to = config.padded_batch_sizes()
            allocate = None
            if self.on_gpu:  # merge the next batch, into pinned memory, while the GPU runs this one
                self._merge_executor = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-v{version}-merge")
                allocate = pinned_allocator(f"{name}:{version}")
            self._scheduler: DirectScheduler | DynamicBatcher = DynamicBatcher(
                self._execute, self._record_execution, self._executor, instances, config.max_batch_size,
                config.dynamic_batching, max_queue_size, f"{name}:{version}", pad_to=self.pad_to,
                merge_executor=self._merge_executor, allocate=allocate,
            )
        else:
            self._scheduler = DirectScheduler(self._execute, self._record_execution, self._executor, instances,
                                              max_queue_size, f"{name}:{version}", inline_ns=inline_us * 1000)
        self._in_flight = 0
        self._drained: asyncio.Event | None = None

    # ----- lifecycle -----------------------------------------------------------------------

    @classmethod
    def load(cls, name: str, version: int, path: Path, config: ModelConfig, *, device: str, instances: int,
             max_queue_size: int, metrics: Metrics, inline_us: int = 0, stamp: tuple = (),
             threads: int = 0, memory_map: bool = False) -> ServedModel:
        """``device`` as lite.Model.load takes it ("auto": CUDA, else ONNX Runtime CPU, else numpy);
        ``threads`` intra-op threads for ONNX Runtime (0: its default); ``memory_map``: map the
        file instead of reading it into private memory (see ``Settings.map_model_files``)."""
        options: dict = {}
        if config.engine is not None:
            options["engine"] = config.engine
            if config.precision is not None:
                options["precision"] = config.precision
            if config.engine == "auto":
                options["batch_sizes"] = config.batch_sizes()
            options.update(config.engine_options)
        # On a GPU, one thread loads the model and runs every execution of it: ONNX Runtime binds
        # CUDA graphs, and cuDNN's fused kernels, to the thread that made the session (a call
        # from another thread gets fresh sessions without the fusion; lite/engines/ort/cuda.py),
        # and one GPU runs one execution at a time anyway. Elsewhere, ``instances`` threads.
        home = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-v{version}")
        try:
            model = home.submit(lite.Model.load, path, device=device, threads=threads or None,
                                memory_map=memory_map, check_weights=True, **options).result()
        except (lite.LiteError, OSError, ValueError, TypeError) as err:
            home.shutdown(wait=False)
            raise ModelLoadError(f"model {name} version {version}: cannot load {path}: {err}") from err
        on_gpu = model.on_gpu
        make = functools.partial(cls, name, version, model, config, device=model.device, instances=instances,
                                 max_queue_size=max_queue_size, metrics=metrics, stamp=stamp)
        try:
            if on_gpu:  # never inline on the event loop's thread either
                served = home.submit(make, inline_us=0, executor=home).result()
            else:
                home.shutdown(wait=False)
                served = make(inline_us=inline_us)
        except ConfigError as err:
            home.shutdown(wait=False)
            raise ModelLoadError(f"model {name} version {version}: {err}") from err
        log.info("model loaded", extra={"model": name, "version": version, "device": served.device,
                                        "requested_device": device, "threads": threads or "default",
                                        "engine": _engine_description(model)})
        try:
            served._executor.submit(served.warmup).result()
        except BaseException:
            served._executor.shutdown(wait=False, cancel_futures=True)
            if served._merge_executor is not None:
                served._merge_executor.shutdown(wait=False, cancel_futures=True)
            raise
        return served

    def warmup(self) -> None:
        """Run the configured warmup requests on zero inputs (blocking); with padded batches, the
        merge buffers are made and one run at each padded size goes first, so that an engine's
        per-shape work (CUDA graph capture, compilation, cuDNN tuning) happens before the model is
        READY, not in a request. Every model is also run once at each of its configured batch sizes
        (1, the preferred sizes and ``max_batch_size``), padded or not: on a GPU each new shape
        costs a CUDA graph capture, and with the torch engine a compilation (or its fast stand-in
        while the compiled configuration is made in the background, docs/runtime.md); on a CPU,
        ONNX Runtime sizes its memory arena and kernels' buffers on the first run of a shape."""
        sizes = set(self.pad_to)
        if self.config.max_batch_size > 0:
            sizes.update(self.config.batch_sizes())
        runs = [(size, 1) for size in sorted(sizes)]
        unknown = unknown_sizes(self._model)
        if unknown and runs:
            # Sizes of 1 are no shape requests bring, and a detector's layers reject a 1x1 image.
            log.info("model %s version %s: input(s) %s have sizes only requests give and the file records no "
                     "sample of them: warm-up at each batch size skipped (convert the model again to record the "
                     "sizes its verification ran on, or configure warmup)", self.name, self.version,
                     ", ".join(unknown), extra={"model": self.name})
            runs = []
        if self.pad_to and not unknown and isinstance(self._scheduler, DynamicBatcher):
            self._scheduler.preallocate(zero_inputs(self._model, 1, self.config.max_batch_size > 0))
        if self.config.warmup is not None:
            runs.append((self.config.warmup.batch_size, self.config.warmup.count))
        for batch_size, count in runs:
            outputs: dict[str, np.ndarray] = {}
            try:
                feed = zero_inputs(self._model, batch_size, self.config.max_batch_size > 0)
                for _ in range(count):
                    outputs = self._model.predict(feed)
            except Exception as err:  # an engine may fail in any way (MemoryError too); say which model and why
                hint = (f" (input(s) {', '.join(unknown)} ran with size 1 where the model leaves a size open: convert "
                        "it again to record the sizes its verification ran on)" if unknown else "")
                raise ModelLoadError(
                    f"model {self.name} version {self.version}: warmup at batch size {batch_size} failed: "
                    f"{type(err).__name__}: {err}{hint}"
                ) from err
            if isinstance(self._scheduler, DynamicBatcher):  # merged requests are split along the first axis
                check_batch_axis(outputs, batch_size, f"model {self.name} version {self.version}")

    def start(self) -> None:
        self._drained = asyncio.Event()
        self._drained.set()
        self._scheduler.start()
        self.state = "READY"

    async def close(self, timeout: float) -> None:
        """Stop taking requests, let queued and running ones finish (up to ``timeout``), stop."""
        self.state = "UNLOADING"
        if self._drained is not None:
            try:
                await asyncio.wait_for(self._drained.wait(), timeout)
            except asyncio.TimeoutError:
                log.warning("model %s version %s: %d requests still running after %.1fs drain",
                            self.name, self.version, self._in_flight, timeout)
        await self._scheduler.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._merge_executor is not None:
            self._merge_executor.shutdown(wait=False, cancel_futures=True)
        self.state = "UNAVAILABLE"
        if self._metrics.pending == self._pending_requests:  # a newer load of this version may own it
            self._metrics.pending = no_pending  # and the metrics must not keep this model alive

    def _pending_requests(self) -> int:
        return self._in_flight

    # ----- inference -------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest, limits: RequestLimits | None = None) -> InferenceResponse:
        """Run ``request``; with ``limits``, an answer past them is refused (and counted a failure)."""
        if self.state != "READY":
            raise ModelNotReadyError(f"model {self.name} version {self.version} is {self.state.lower()}")
        start = time.perf_counter_ns()
        self._in_flight += 1
        self._drained.clear()
        try:
            rows = self._signature.check(request)
            scheduled = await self._scheduler.submit(request.inputs, rows, request.deadline)
            response = self._respond(request, scheduled)
            if limits is not None:
                self._check_answer(limits, request, scheduled, response)
        except BaseException as err:
            self._record_failure(err, time.perf_counter_ns() - start)
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._drained.set()
        total = time.perf_counter_ns() - start
        self.stats.record_request(True, total, scheduled.queue_ns)
        self._metrics.success(total / 1e9, scheduled.queue_ns / 1e9)
        return response

    def _check_answer(self, limits: RequestLimits, request: InferenceRequest, scheduled: Scheduled,
                      response: InferenceResponse) -> None:
        try:
            limits.check_answer(self.name, scheduled.outputs, response, request.outputs, request.parameters)
        except ResourceExhaustedError as err:
            log.warning("model %s version %s: answer refused: %s", self.name, self.version, err,
                        extra={"model": self.name})
            raise

    def _record_failure(self, err: BaseException, total_ns: int) -> None:
        self.stats.record_request(False, total_ns)
        self._metrics.failure(outcome_of(err))

    def _execute(self, inputs: Tensors) -> Tensors:
        """Run the model on served-name inputs; served-name outputs. Called in a worker thread."""
        feed = {self._served_to_model[name]: array for name, array in inputs.items()} if self._renames else dict(inputs)
        if self._preprocess is not None:
            name = self._preprocess.input_name
            feed[name] = self._preprocess(feed[name])
        try:
            outputs = self._model.predict(feed)
        except lite.InvalidInputError as err:
            raise InvalidRequestError(f"model {self.name} version {self.version}: {err}") from err
        except ServingError:
            raise
        except Exception as err:  # engine and kernel failures of any kind: the request gets INTERNAL
            empty = self._empty_extent(inputs)
            if empty is not None and isinstance(err, lite.LiteError):
                # Models that take empty extents (no detections for a second stage) are served; one
                # that fails on them failed on what the request sent, not in the server.
                raise InvalidRequestError(f"model {self.name} version {self.version} does not run on {empty}: "
                                          f"{err}") from err
            log.exception("model %s version %s failed", self.name, self.version)
            raise InferenceFailedError(f"model {self.name} version {self.version} failed: {err}") from err
        if not self._renames:
            return outputs
        return {self._model_to_served[name]: array for name, array in outputs.items()}

    def _empty_extent(self, inputs: Tensors) -> str | None:
        """Which input has a size of 0 beyond the batch, said for a message; None when none has."""
        first = 1 if self.config.max_batch_size > 0 else 0
        for name, array in inputs.items():
            shape = getattr(array, "shape", ())
            if 0 in shape[first:]:
                return f"input {name!r} of shape {list(shape)} (an empty dimension)"
        return None

    def _record_execution(self, times: ExecutionTimes, requests: int) -> None:
        """Called by the scheduler once per model execution (a batch)."""
        self.stats.record_execution(times, requests)
        self._metrics.execution((times.input_ns + times.infer_ns + times.output_ns) / 1e9, times.batch_size)

    def _respond(self, request: InferenceRequest, scheduled: Scheduled) -> InferenceResponse:
        outputs = scheduled.outputs
        wanted = request.outputs or [RequestedOutput(info.name) for info in self.outputs]
        answered = []
        for output in wanted:
            array = outputs[output.name]
            if output.classification > 0:
                array = classify(array, output.classification, self._labels.get(output.name, []),
                                 self.config.max_batch_size > 0)
            answered.append((output.name, array))
        return InferenceResponse(self.name, self.version, request.id, answered)

    # ----- signature ---------------------------------------------------------------------------

    def _input_info(self, spec: lite.TensorSpec) -> TensorInfo:
        served = self.config.input_names.get(spec.name, spec.name)
        if self._preprocess is not None and spec.name == self._preprocess.input_name:
            return TensorInfo(served, "BYTES", (-1,))  # one encoded image per batch item
        return self._info(served, spec)

    def _info(self, served: str, spec: lite.TensorSpec) -> TensorInfo:
        if spec.dtype is None or spec.shape is None:
            raise ConfigError(f"tensor {spec.name!r} has no declared dtype or rank; it cannot be served")
        shape = tuple(d if isinstance(d, int) else -1 for d in spec.shape)
        return TensorInfo(served, datatype_of(spec.dtype), shape, tuple(spec.shape))

    def _check_batching(self) -> None:
        check_renames(self.config, [s.name for s in self._model.inputs], [s.name for s in self._model.outputs])
        if self.config.max_batch_size == 0:
            return
        for info in self.inputs + self.outputs:
            if not info.shape or info.shape[0] != -1:
                raise ConfigError(
                    f"max_batch_size {self.config.max_batch_size} needs a variable first (batch) dimension, "
                    f"but {info.name!r} has shape {list(info.shape)}"
                )

    @property
    def labels(self) -> list[str]:
        return self._labels


def outcome_of(err: BaseException) -> str:
    """A metrics label for a failure: "cancelled" or the error class in snake case."""
    if isinstance(err, asyncio.CancelledError):
        return "cancelled"
    name = type(err).__name__.removesuffix("Error")
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_") or "error"


def _engine_description(model: lite.Model) -> str:
    """What runs the model: the autotuned choice per batch size, or the engine's name."""
    decision = getattr(model.engine, "decision", None)
    if isinstance(decision, dict) and decision.get("buckets"):
        return ", ".join(f"batch {b['batch']}: {b['chosen']}" for b in decision["buckets"])
    return getattr(model.engine, "name", type(model.engine).__name__)
