"""The parts of a partitioned graph and the values handed between them.

The ONNX Runtime engine (:mod:`lite.engines.ort.engine`) cuts a model's main graph into segments,
each an ONNX Runtime session or a numpy plan, run in order; a segment whose inputs come from a
custom op has no declared types and gets its session on its first call. Values cross between the
host, the device and ONNX Runtime's Python binding on the way: device arrays to the host for CPU
segments, outputs back to the device for callers that passed device arrays, and byte strings as
the UTF-8 text ONNX Runtime carries.

A call runs the segments in order (:func:`run_in_order`), or, where CUDA custom kernels run
between ONNX Runtime segments, with values left on the GPU (:func:`run_on_device`). Either lets a
segment typed on its first call raise :class:`sessions.MissingKernel`: the engine then moves that
node to the numpy engine and runs the call again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lite.device_arrays import DeviceArray, is_device_array, numpy_dtype_of_ortvalue
from lite.engines.ort import sessions
from lite.engines.ort.cuda import caller_stream
from lite.engines.ort.device_kernels import CudaStream, run_bound
from lite.errors import InvalidInputError
from lite.format import ir
from lite.format.dtypes import DataType, from_numpy


@dataclass
class Segment:
    on_ort: bool
    nodes: list[ir.Node]
    inputs: list[int]
    outputs: list[int]
    runner: Any = None
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    on_device_kernels: bool = False  # custom nodes whose CUDA kernels run on device memory

    def run(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {name: values[name] for name in self.input_names}
        if self.on_ort:
            results = self.runner.run(list(self.output_names), feeds)
            return dict(zip(self.output_names, results))
        return self.runner.run(feeds)


class TypedOnFirstRun:
    """A session for a segment whose inputs have no declared type (they come from a custom op):
    built on the first call, typed from the arrays it receives, one session per input dtypes."""

    def __init__(self, build: Callable[[dict[str, DataType]], sessions.Session]) -> None:
        self.build = build
        self.sessions: dict[tuple, sessions.Session] = {}
        self.lock = threading.Lock()

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session_for({name: array.dtype for name, array in feeds.items()}).run(output_names, feeds)

    def session_for(self, dtypes: dict[str, np.dtype]) -> sessions.Session:
        key = tuple((name, dtype.str) for name, dtype in dtypes.items())
        session = self.sessions.get(key)
        if session is None:
            with self.lock:
                session = self.sessions.get(key)
                if session is None:
                    session = self.sessions[key] = self.build({name: from_numpy(d) for name, d in dtypes.items()})
        return session


def host_array(value: Any) -> np.ndarray:
    """numpy arrays as they are; device arrays copied to the host (partitioned or CPU graphs)."""
    if is_device_array(value):
        from onnxruntime import OrtValue

        return OrtValue.from_dlpack(value).numpy()
    return value


def from_device(value: Any) -> Any:
    """A host array of an OrtValue on the device; numpy arrays as they are."""
    return value if isinstance(value, np.ndarray) else value.numpy()


def to_device(ort_value, value: Any, device_id: int) -> DeviceArray:
    """An output for a caller that passed device arrays: on the device, whichever segment made it."""
    if isinstance(value, np.ndarray):
        value = ort_value.ortvalue_from_numpy(np.ascontiguousarray(value), "cuda", device_id)
    return DeviceArray(value)


def as_text(name: str, array: np.ndarray) -> np.ndarray:
    """ONNX Runtime's Python binding holds string elements as text: decode bytes as UTF-8."""
    def decode(item):
        if isinstance(item, bytes):
            try:
                return item.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InvalidInputError(
                    f"input {name!r}: ONNX Runtime carries strings as UTF-8 text and {item[:16]!r} is not UTF-8 "
                    "(use device='numpy' for arbitrary bytes)"
                ) from err
        return item

    return np.asarray(np.frompyfunc(decode, 1, 1)(array), dtype=object) if array.size else array


def run_in_order(segments: list[Segment], feeds: Mapping[str, np.ndarray],
                 output_names: list[str]) -> dict[str, np.ndarray]:
    """Host arrays through the segments, each reading the values the ones before it made."""
    values: dict[str, np.ndarray] = dict(feeds)
    for segment in segments:
        values.update(segment.run(values))
    return {name: values[name] for name in output_names}


def run_on_device(segments: list[Segment], feeds: Mapping[str, Any], output_names: list[str], ort: Any,
                  stream: CudaStream, device_id: int, *, shares_stream: bool) -> dict[str, Any]:
    """Segments with CUDA kernels among them: values stay on the GPU (see device_kernels.py);
    outputs on the device for callers that pass device arrays, else numpy arrays.
    ``shares_stream``: ONNX Runtime's segments queue their work on the kernels' ``stream``."""
    on_device = any(is_device_array(value) for value in feeds.values())
    caller = caller_stream(feeds)
    if caller is not None:
        caller.synchronize()  # the caller's PyTorch work that produced the inputs
    ort_value = ort.OrtValue
    values = {name: ort_value.from_dlpack(value) if is_device_array(value) else value
              for name, value in feeds.items()}
    queued = False  # kernels queued on the stream that the host has not waited for
    for segment in segments:
        inputs = {name: values[name] for name in segment.input_names}
        if segment.on_device_kernels:
            values.update(segment.runner.run(inputs))
            queued = True
            continue
        if queued and not (segment.on_ort and shares_stream):
            stream.synchronize()
            queued = False
        if segment.on_ort:
            session = _session(segment, inputs)
            values.update(zip(segment.output_names, run_bound(session.session, inputs, segment.output_names,
                                                              device_id)))
        else:
            values.update(segment.runner.run({name: from_device(value) for name, value in inputs.items()}))
    if queued:
        stream.synchronize()
    if on_device:
        return {name: to_device(ort_value, values[name], device_id) for name in output_names}
    return {name: from_device(values[name]) for name in output_names}


def _session(segment: Segment, feeds: Mapping[str, Any]) -> sessions.Session:
    runner = segment.runner
    if isinstance(runner, TypedOnFirstRun):
        return runner.session_for({name: value.dtype if isinstance(value, np.ndarray)
                                   else numpy_dtype_of_ortvalue(value) for name, value in feeds.items()})
    return runner
