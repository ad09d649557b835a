"""CUDA custom kernels (MindSpore's AOT signature) between ONNX Runtime's CUDA segments, on the GPU.

When every custom node of a run has a CUDA kernel (``CustomOps.library(..., device="cuda")``),
the CUDA engine keeps the data on the device from one segment to the next::

    inputs ─► ONNX Runtime segment ─► CUDA kernels ─► ONNX Runtime segment ─► outputs
              (IOBinding: outputs     (device pointers,  (reads the kernels'
               left on the GPU)        stream S)          outputs in place)

- ONNX Runtime segments run through an IOBinding (:func:`run_bound`): device inputs bound in
  place, numpy inputs copied by ONNX Runtime, outputs left in its device memory.
- A kernel (:class:`KernelSteps`) gets the device pointers of its inputs, of its constant inputs
  and of the attributes named in ``attributes_as_inputs`` (both uploaded once, at load), and of
  outputs allocated on the GPU (``OrtValue.ortvalue_from_shape_and_type``), and stream S.
- S (:class:`CudaStream`) is a non-blocking stream of the engine, made through the CUDA driver
  API (libcuda, present wherever the CUDA provider runs; no array library needed). On
  ``device="cuda"`` ONNX Runtime's segments run on S too (the provider's ``user_compute_stream``),
  so a kernel is queued after the segment that produced its inputs and before the one that reads
  its outputs, with no wait of the engine's in between (ONNX Runtime's run still returns once its
  stream is done). The host waits for S alone, never the whole device, and
  only where it reads a kernel's output: before a numpy segment and at the end of a call (and,
  under TensorRT, whose provider runs on streams of its own, before each ONNX Runtime segment).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from lite.device_arrays import numpy_dtype_of_ortvalue
from lite.errors import EngineUnavailableError, KernelError
from lite.format import ir

_DRIVER = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
_CU_STREAM_NON_BLOCKING = 1  # not ordered with the legacy default stream (ONNX Runtime's copies use it)


class CudaStream:
    """A non-blocking CUDA stream on the primary context of one device (what the CUDA runtime,
    and so ONNX Runtime and nvcc-built kernels, use), created and waited for through libcuda.

    The stream and the context are kept for the life of the process: sessions built on the
    stream may use it until they are torn down, in an order the engine does not control."""

    def __init__(self, device_id: int) -> None:
        try:
            driver = ctypes.CDLL(_DRIVER)
        except OSError as err:
            raise EngineUnavailableError(f"CUDA custom kernels need the CUDA driver library ({_DRIVER}): {err}") from err
        driver.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        driver.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        driver.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
        driver.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        driver.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        driver.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        driver.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.driver = driver
        self._check(driver.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self._check(driver.cuDeviceGet(ctypes.byref(device), device_id), f"cuDeviceGet({device_id})")
        self.context = ctypes.c_void_p()
        self._check(driver.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device.value),
                    "cuDevicePrimaryCtxRetain")
        stream = ctypes.c_void_p()
        with self._current():
            self._check(driver.cuStreamCreate(ctypes.byref(stream), _CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        self.handle: int = stream.value or 0  # a cudaStream_t, as ONNX Runtime's options and the kernels take it

    def synchronize(self) -> None:
        """Wait until the work queued on the stream is done."""
        with self._current():
            self._check(self.driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    @contextmanager
    def _current(self) -> Iterator[None]:
        # Driver calls act on the calling thread's current context: make it the primary one for
        # the call, and give the thread back whatever it had.
        self._check(self.driver.cuCtxPushCurrent_v2(self.context), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self.driver.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            self.driver.cuGetErrorName(status, ctypes.byref(name))
            text = name.value.decode() if name.value else f"error {status}"
            raise KernelError(f"CUDA driver call {call} failed: {text}")


@dataclass(frozen=True)
class BufferSpec:
    """What a kernel's ``output_shapes``/``output_dtypes`` functions see of a device input."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


def spec_of(value: Any) -> BufferSpec:
    """Shape and dtype of a numpy array or an OrtValue."""
    if isinstance(value, np.ndarray):
        return BufferSpec(value.shape, value.dtype)
    return BufferSpec(tuple(value.shape()), numpy_dtype_of_ortvalue(value))


class KernelSteps:
    """A run of custom nodes whose CUDA kernels run on device OrtValues, on the engine's stream."""

    def __init__(self, ort, graph: ir.Graph, nodes: list[ir.Node], kernels: list[Any], device_id: int,
                 stream: CudaStream) -> None:
        from lite.custom_ops import attribute_inputs
        from lite.format.values import attribute_value, tensor_value

        self.ort = ort
        self.device_id = device_id
        self.stream = stream
        self.steps = []
        for node, kernel in zip(nodes, kernels):
            attributes = {name: attribute_value(a) for name, a in node.attributes.items()}
            extras = [self.upload(a) for a in attribute_inputs(kernel.label, kernel.attributes_as_inputs, attributes)]
            inputs = [graph.tensors[i] if i >= 0 else None for i in node.inputs]
            constants = {position: self.upload(np.ascontiguousarray(tensor_value(t)))
                         for position, t in enumerate(inputs) if t is not None and t.is_constant}
            names = [None if t is None else t.name for t in inputs]
            outputs = [graph.tensors[i].name for i in node.outputs if i >= 0]
            self.steps.append((kernel, names, constants, extras, outputs))

    def upload(self, array: np.ndarray) -> Any:
        """A device copy of a host array (ONNX Runtime's copy returns once it is complete)."""
        return self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), "cuda", self.device_id)

    def run(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Queue each kernel on the stream; ``values`` are OrtValues on the device or numpy arrays."""
        produced: dict[str, Any] = {}
        for kernel, names, constants, extras, outputs in self.steps:
            inputs = []
            for position, name in enumerate(names):
                value = constants[position] if position in constants else produced.get(name, values.get(name))
                if value is None:
                    raise KernelError(f"custom op {kernel.label}: input {position} is omitted, and an AOT kernel "
                                      "takes every input as a buffer")
                inputs.append(self.upload(value) if isinstance(value, np.ndarray) else value)
            results = [self.ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype.type, "cuda", self.device_id)
                       for shape, dtype in kernel.output_specs([spec_of(v) for v in inputs])]
            buffers = [*inputs, *extras, *results]
            kernel.call([b.data_ptr() for b in buffers], [tuple(b.shape()) for b in buffers],
                        [numpy_dtype_of_ortvalue(b) for b in buffers], self.stream.handle)
            produced.update(zip(outputs, results))
        return produced


def run_bound(session: Any, feeds: Mapping[str, Any], output_names: tuple[str, ...], device_id: int) -> list[Any]:
    """Run an ONNX Runtime session on ``feeds`` (device OrtValues bound in place, numpy arrays
    copied by ONNX Runtime), its outputs left on the device as OrtValues."""
    binding = session.io_binding()
    for name, value in feeds.items():
        if isinstance(value, np.ndarray):
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        else:
            binding.bind_ortvalue_input(name, value)
    for name in output_names:
        binding.bind_output(name, "cuda", device_id)
    try:
        session.run_with_iobinding(binding)
    except Exception as err:  # ONNX Runtime's run-time refusals are untyped: name them
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise KernelError(f"ONNX Runtime failed to run a segment of the model: {first}") from err
    return binding.get_outputs()
