"""The GPU data path of the ONNX Runtime engine: inputs and outputs that stay on the device.

- Inputs may be any DLPack-capable CUDA array (PyTorch, CuPy, JAX, a :class:`DeviceArray`): they
  are bound in place (``OrtValue.from_dlpack``, no copy) through an IOBinding. Outputs of such a
  call stay on the GPU and come back as :class:`DeviceArray` objects, which PyTorch and CuPy
  import without a copy (``torch.from_dlpack(y)``, ``cupy.from_dlpack(y)``).
- numpy inputs are copied to the device once per call and outputs copied back; into a graphed
  bucket, large ones go through a pinned staging buffer in overlapping chunks when PyTorch is
  loaded (:class:`lite.engines.host_upload.HostUploader`).
- CUDA graphs (``cuda_graph=True``): each distinct set of input shapes (a bucket, at most
  ``MAX_GRAPH_BUCKETS``) is captured once and replayed. Replay needs fixed addresses, so every
  bucket owns device buffers for its inputs and outputs; a call copies its inputs into them
  (device to device for device inputs) and its outputs out of them.
- Sessions run on one thread: the one that loaded the model, until another thread calls; then a
  worker thread with fresh sessions runs every call (``CudaRunner.run`` says why).
- When the caller uses PyTorch (imported before the model is loaded), the graphed session runs
  on a CUDA stream lite takes from PyTorch, and calls with device arrays are asynchronous, as
  PyTorch's own operations are: the input copies into the bucket's buffers, the graph replay and
  the output copies are queued on the session's stream, and two CUDA events order them after
  the caller's current stream's work and before its next; ``predict`` returns without waiting
  for the GPU (ONNX Runtime's end-of-run synchronisation is switched off for these calls), so
  its host work overlaps the GPU's. Device arrays of other libraries (CuPy, JAX, DeviceArray)
  take the same path as PyTorch views of their memory. A repeated call with tensors of the last
  call's shapes goes straight to its bucket (``CudaRunner.fast``). numpy calls are synchronous.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from lite.device_arrays import (
    DeviceArray,
    device_array_spec,
    is_device_array,
    numpy_dtype_of_ortvalue,
    synchronize_device,
)
from lite.engines.host_upload import STAGED_MIN_BYTES, HostUploader
from lite.engines.ort.sessions import Session

MAX_GRAPH_BUCKETS = 16  # a server padding to powers of two up to 256 uses 9


class CudaRunner:
    """Runs one whole-graph session on CUDA with IOBinding (and optionally CUDA graphs)."""

    def __init__(self, ort, plain: Session, graphed: Session | None, device_id: int, stream=None,
                 rebuild: Callable[[], tuple[Session, Session | None]] | None = None) -> None:
        """``rebuild``: makes fresh sessions (plain, graphed) in the calling thread, for the worker."""
        self.ort = ort
        self.plain = plain
        self.graphed = graphed
        self.device_id = device_id
        self.stream = stream  # the torch.cuda.Stream the graphed session runs on, if any
        self.rebuild = rebuild
        self.buckets: dict[tuple, _Bucket] = {}
        self.lock = threading.Lock()
        # The thread that made the sessions and runs them; a worker thread of this runner once
        # another thread calls (see run).
        self.session_thread = threading.get_ident()
        self.worker = None
        self.retired: list[tuple[Session, Session | None]] = []
        self.graph_ids = itertools.count(1)  # never reused: a stale graph is never replayed by mistake
        self.output_names = plain.output_names
        self.uploader: HostUploader | None = None  # large numpy inputs, when PyTorch is loaded (made on first use)
        self.fast: _Bucket | None = None  # the bucket of the last asynchronous PyTorch call (run's fast path)

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        fast = self.fast
        if fast is not None and fast.torch.matches(feeds):
            # The common GPU call: PyTorch tensors of the last call's shapes, from the loading thread.
            with self.lock:  # as below: a worker is never started while the session thread runs
                if self.worker is None and threading.get_ident() == self.session_thread:
                    return fast.torch.run_async(feeds, fast.replay_async)
        # A CUDA session runs on one thread only: the thread that made it. ONNX Runtime keeps
        # CUDA graphs in per-thread contexts (handed on to new threads when a thread ends) and does
        # not support concurrent runs of a graphed session; and cuDNN's runtime-fused kernels
        # (fuse_conv_bias) failed on any thread but the main one (ResNet-50 fp16 on an H200, ONNX
        # Runtime 1.31.1, cuDNN 9.19: "illegal instruction", "illegal memory access", "misaligned
        # address"; see SessionConfig.fuse_conv_bias). So calls from the thread that loaded the
        # model run inline (a hand-off to another thread on every call would add a thread
        # switch to each batch-1 call); the first call from any other thread starts a worker thread
        # that makes fresh sessions, without that fusion, and runs every call from then on.
        on_device = any(is_device_array(v) for v in feeds.values())
        if on_device and self.stream is not None:
            feeds = _as_torch(feeds)  # CuPy, JAX, DeviceArray: PyTorch views, for the asynchronous path
        me = threading.get_ident()
        if self.worker is None:
            with self.lock:
                if self.worker is None:
                    if me == self.session_thread:
                        return self._run_here(feeds, on_device)
                    self._start_worker()
        if me == self.session_thread:
            return self._run_here(feeds, on_device)
        stream = caller_stream(feeds)
        return self.worker.submit(self._run_on_worker, feeds, on_device, stream).result()

    def _start_worker(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        for bucket in self.buckets.values():
            if bucket.torch is not None:
                bucket.torch.settle()
        self.buckets = {}
        self.fast = None
        worker = ThreadPoolExecutor(1, thread_name_prefix="lite-cuda-session")
        try:
            thread, sessions = worker.submit(lambda: (threading.get_ident(), self.rebuild and self.rebuild())).result()
        except BaseException:
            worker.shutdown(wait=False)  # the next call from another thread tries again
            raise
        if sessions is not None:
            # Kept, not closed: a session is torn down on the thread that made it, at exit.
            self.retired.append((self.plain, self.graphed))
            self.plain, self.graphed = sessions
        self.session_thread = thread
        self.worker = worker  # published last: a thread that sees it also sees session_thread

    def _run_on_worker(self, feeds: dict[str, Any], on_device: bool, stream) -> dict[str, Any]:
        if stream is None:
            return self._run_here(feeds, on_device)
        # The caller's current stream, so that its copies are ordered as if it ran them itself.
        with sys.modules["torch"].cuda.stream(stream):
            return self._run_here(feeds, on_device)

    def _run_here(self, feeds: dict[str, Any], on_device: bool) -> dict[str, Any]:
        if self.graphed is None:
            return self._run_bound(feeds, on_device)
        key = tuple((name, tuple(v.shape)) for name, v in feeds.items())
        bucket = self.buckets.get(key)
        if bucket is None and len(self.buckets) < MAX_GRAPH_BUCKETS:
            bucket = self._capture(key, feeds)
        if bucket is not None:
            if on_device and bucket.replay_async is not None and bucket.torch.matches(feeds):
                if self.worker is None:
                    self.fast = bucket
                return bucket.torch.run_async(feeds, bucket.replay_async)
            return bucket.run(feeds, on_device)
        return self._run_bound(feeds, on_device)

    def _run_bound(self, feeds: dict[str, Any], on_device: bool) -> dict[str, Any]:
        binding = self.plain.session.io_binding()
        keep = []
        for name, value in feeds.items():
            if is_device_array(value):
                ortvalue = self.ort.OrtValue.from_dlpack(value)
                keep.append(ortvalue)
                binding.bind_ortvalue_input(name, ortvalue)
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in self.output_names:
            binding.bind_output(name, "cuda", self.device_id)
        self.plain.session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        if on_device:
            return {name: DeviceArray(value) for name, value in zip(self.output_names, outputs)}
        return {name: value.numpy() for name, value in zip(self.output_names, outputs)}

    def bind(self, feeds: dict[str, Any]):
        """Bound buffers on a CUDA graph of their own (``Model.bind``, cuda_binding.py); None where
        graphs are off or declined, or the sessions already moved to a worker thread."""
        if self.graphed is None:
            return None
        from lite.engines.ort.cuda_binding import GraphBinding

        with self.lock:
            if self.worker is not None or threading.get_ident() != self.session_thread:
                return None
            bucket = self._capture(None, feeds)
        return GraphBinding(self, bucket)

    def _capture(self, key: tuple | None, feeds: dict[str, Any]) -> _Bucket:
        """A bucket for these inputs' shapes, kept under ``key`` for later calls (None: a binding's own)."""
        # Output shapes come from one ordinary run; then buffers are fixed and the graph captured.
        probe = self._run_bound(feeds, on_device=False)
        graph_id = next(self.graph_ids)
        bucket = _Bucket(self.ort, self.graphed, self.device_id, graph_id, feeds, probe, self.stream)
        if bucket.torch is not None:
            if self.uploader is None:
                self.uploader = HostUploader(bucket.torch.torch, bucket.torch.device)
            bucket.uploader = self.uploader
        if key is not None:
            self.buckets[key] = bucket
        return bucket


class _Bucket:
    def __init__(self, ort, session: Session, device_id: int, graph_id: int, feeds: dict[str, Any],
                 probe: dict[str, np.ndarray], stream=None) -> None:
        self.ort = ort
        self.session = session
        self.device_id = device_id
        self.inputs = {}
        for name, value in feeds.items():
            shape, dtype = (value.shape, value.dtype) if isinstance(value, np.ndarray) else device_array_spec(value)
            self.inputs[name] = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.dtype(dtype).type, "cuda",
                                                                          device_id)
        self.outputs = {name: ort.OrtValue.ortvalue_from_shape_and_type(list(value.shape), value.dtype.type, "cuda",
                                                                        device_id)
                        for name, value in probe.items()}
        self.binding = session.session.io_binding()
        for name, value in self.inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        for name, value in self.outputs.items():
            self.binding.bind_ortvalue_output(name, value)
        self.options = ort.RunOptions()
        self.options.add_run_config_entry("gpu_graph_id", str(graph_id))
        self.torch: _TorchViews | None = None
        self.uploader: HostUploader | None = None  # the runner's, once PyTorch views exist
        self.run(feeds, on_device=False)  # the first run with this id captures the graph
        self.torch = _TorchViews.of(self.inputs, self.outputs, stream)
        # Asynchronous replays for PyTorch callers (ordering is by streams, see the module doc):
        # a callable made once, not per call.
        self.replay_async: Callable[[], None] | None = None
        if self.torch is not None and self.torch.stream is not None:
            async_options = ort.RunOptions()
            async_options.add_run_config_entry("gpu_graph_id", str(graph_id))
            async_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
            run_with_iobinding, binding = session.session.run_with_iobinding, self.binding
            self.replay_async = lambda: run_with_iobinding(binding, async_options)

    def run(self, feeds: dict[str, Any], on_device: bool) -> dict[str, Any]:
        if on_device and self.torch is not None and self.torch.stream is None and self.torch.accepts(feeds):
            return self.torch.run(feeds, lambda: self.session.session.run_with_iobinding(self.binding, self.options))
        if self.torch is not None:
            self.torch.settle()  # an asynchronous call may still be using the buffers
        copied_on_device = staged = False
        for name, value in feeds.items():
            if is_device_array(value):
                self.inputs[name].update_inplace(self.ort.OrtValue.from_dlpack(value))
                copied_on_device = True
            elif self.uploader is not None and isinstance(value, np.ndarray) and value.nbytes >= STAGED_MIN_BYTES and value.dtype.kind in "biuf":
                # Through pinned memory in overlapped chunks, not one pageable copy (host_upload.py).
                self.uploader.upload_into(value, self.torch.inputs[name])
                staged = True
            else:
                self.inputs[name].update_inplace(np.ascontiguousarray(value))
        if staged:
            self.uploader.wait()  # the replay runs on a stream these copies are not ordered with
        if copied_on_device:
            # A device-to-device copy returns before it is done, on a stream the replay's stream
            # is not ordered after: wait for it (host-to-device copies from numpy are synchronous).
            synchronize_device(self.device_id)
        self.session.session.run_with_iobinding(self.binding, self.options)
        if not on_device:
            return {name: value.numpy() for name, value in self.outputs.items()}
        results = {}
        for name, value in self.outputs.items():
            copy = self.ort.OrtValue.ortvalue_from_shape_and_type(value.shape(), numpy_dtype_of_ortvalue(value).type, "cuda",
                                                                  self.device_id)
            copy.update_inplace(value)  # the bucket's buffer is overwritten by the next replay
            results[name] = DeviceArray(copy)
        synchronize_device(self.device_id)  # those copies, too, return before they are done
        return results


class _TorchViews:
    """PyTorch views of a bucket's input and output buffers, for callers that pass PyTorch tensors."""

    def __init__(self, torch, inputs: dict[str, Any], outputs: dict[str, Any], stream) -> None:
        self.torch = torch
        self.inputs = {name: torch.from_dlpack(value) for name, value in inputs.items()}
        self.outputs = {name: torch.from_dlpack(value) for name, value in outputs.items()}
        self.device = next(iter(self.inputs.values())).device
        # What matches's callers pass: one (shape, dtype) per input, in the bucket's order.
        self.signature = [(name, view.shape, view.dtype) for name, view in self.inputs.items()]
        self.stream = stream  # the stream the session replays on (asynchronous calls), or None
        self.last_stream = None
        if stream is not None:  # reused every call: recording again re-arms an event
            self.inputs_ready = torch.cuda.Event()
            self.replayed = torch.cuda.Event()

    @classmethod
    def of(cls, inputs: dict[str, Any], outputs: dict[str, Any], stream=None) -> _TorchViews | None:
        torch = sys.modules.get("torch")  # only when the caller already uses PyTorch: never imported here
        if torch is None or not inputs or not hasattr(next(iter(inputs.values())), "__dlpack__"):
            return None
        try:
            return cls(torch, inputs, outputs, stream)
        except Exception:  # an ONNX Runtime or PyTorch without DLPack interchange: the generic path
            return None

    def accepts(self, feeds: dict[str, Any]) -> bool:
        tensor = self.torch.Tensor
        return all(isinstance(value, tensor) and value.device == self.device for value in feeds.values())

    def matches(self, feeds: dict[str, Any]) -> bool:
        """PyTorch tensors on this GPU with exactly the buffers' shapes and dtypes (no conversion)."""
        if len(feeds) != len(self.signature):
            return False
        tensor, device = self.torch.Tensor, self.device
        for name, shape, dtype in self.signature:
            value = feeds.get(name)
            if type(value) is not tensor or value.shape != shape or value.dtype != dtype or value.device != device:
                return False
        return True

    def run(self, feeds: dict[str, Any], replay) -> dict[str, Any]:
        stream = self.torch.cuda.current_stream(self.device)
        if self.last_stream is not None and self.last_stream != stream:
            self.last_stream.synchronize()  # the previous call's output copies read the buffers there
        for name, value in feeds.items():
            self.inputs[name].copy_(value)
        # ONNX Runtime replays on its own stream: the inputs (and whatever produced them on the
        # caller's stream) must be complete first. Its run returns after its stream finished, so
        # the output copies below, on the caller's stream, read final values.
        stream.synchronize()
        replay()
        self.last_stream = stream
        return {name: DeviceArray(view.clone()) for name, view in self.outputs.items()}

    def settle(self) -> None:
        """Wait until the last call through these views no longer uses the bucket's buffers."""
        if self.last_stream is not None:
            self.last_stream.synchronize()  # its output copies, queued after the replay
        if self.stream is not None:
            self.stream.synchronize()

    def run_async(self, feeds: dict[str, Any], replay) -> dict[str, Any]:
        # Every use of the bucket's buffers is queued on the session's stream, so calls need no
        # ordering among themselves and the replay is followed at once by the output copies on
        # the same stream. Two events order it with the caller's stream: after whatever produced
        # the inputs, before whatever reads the outputs. A caller waiting for its answer waits for
        # the host work before the replay is queued, so everything else comes after it. The
        # outputs are allocated on the caller's stream, as its own results would be (the caching
        # allocator reuses a freed block on that stream only after the work queued there, which
        # waits for these copies).
        torch = self.torch
        current = torch.cuda.current_stream(self.device)
        side = self.stream
        self.inputs_ready.record(current)
        side.wait_event(self.inputs_ready)
        torch.cuda.set_stream(side)
        try:
            for name, value in feeds.items():
                self.inputs[name].copy_(value)
            replay()  # queued on the session's stream; returns without waiting for it
        finally:
            torch.cuda.set_stream(current)
        results = {name: torch.empty_like(view) for name, view in self.outputs.items()}
        torch.cuda.set_stream(side)
        try:
            for name, result in results.items():
                result.copy_(self.outputs[name])
        finally:
            torch.cuda.set_stream(current)
        self.replayed.record(side)
        current.wait_event(self.replayed)
        return {name: DeviceArray(result) for name, result in results.items()}


def _as_torch(feeds: dict[str, Any]) -> dict[str, Any]:
    """Device arrays of other libraries as PyTorch tensors over the same memory (DLPack; the
    exporter orders its current stream before PyTorch's), so that they take the asynchronous
    path too; their outputs come back as DeviceArray objects any DLPack library imports."""
    torch = sys.modules["torch"]
    converted = {}
    for name, value in feeds.items():
        if type(value) is not torch.Tensor and is_device_array(value):
            try:
                value = torch.from_dlpack(value)
            except Exception:  # noqa: BLE001 - not importable by PyTorch: the generic path takes it
                pass
        converted[name] = value
    return converted


def torch_stream(device_id: int):
    """A PyTorch CUDA stream for a graphed session to run on, when the process uses PyTorch
    (imported before the model is loaded; lite never imports it); else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        return torch.cuda.Stream(device=device_id)
    except Exception:  # a PyTorch without CUDA, or another device numbering: ONNX Runtime's own stream
        return None


def caller_stream(feeds: dict[str, Any]):
    """The calling thread's current PyTorch stream when it passes PyTorch CUDA tensors, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for value in feeds.values():
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return torch.cuda.current_stream(value.device)
    return None
