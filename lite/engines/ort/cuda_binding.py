"""Bound buffers on a CUDA graph of their own: a run is the graph's replay (see lite/binding.py).

The binding owns a bucket (input and output buffers, a captured graph) that ``predict`` never
uses, so nothing but the caller writes its inputs. With PyTorch loaded the replay is queued on
the session's stream between two events: after the caller's current stream's work (which wrote
the inputs) and before its next (which reads the outputs); without PyTorch it waits for the
device first and runs synchronously. Once calls from another thread have moved the runner's
sessions to a worker thread (CudaRunner.run says why), a bound run goes through that worker
and copies its results into the output buffers.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from lite.binding import Binding, check_same_kind
from lite.device_arrays import DeviceArray, is_device_array, synchronize_device
from lite.errors import InvalidInputError


class GraphBinding(Binding):
    def __init__(self, runner: Any, bucket: Any) -> None:
        views = bucket.torch
        if views is not None:
            inputs, outputs = dict(views.inputs), dict(views.outputs)
        else:
            inputs = {name: DeviceArray(value) for name, value in bucket.inputs.items()}
            outputs = {name: DeviceArray(value) for name, value in bucket.outputs.items()}
        super().__init__(inputs)
        self.outputs.update(outputs)
        self.buffers = dict(inputs)  # what ``inputs`` holds between runs
        self.output_buffers = dict(outputs)
        self.runner = runner
        self.bucket = bucket
        self.views = views
        self.asynchronous = bucket.replay_async is not None
        if self.asynchronous:
            torch = views.torch
            self.inputs_ready, self.replayed = torch.cuda.Event(), torch.cuda.Event()

    def run(self) -> dict[str, Any]:
        inputs = self.inputs
        for name, buffer in self.buffers.items():
            if inputs.get(name) is not buffer:
                self._copy_in(name, inputs.get(name), buffer)
        runner = self.runner
        if runner.worker is not None or threading.get_ident() != runner.session_thread:
            return self._run_on_worker()
        self.outputs.update(self.output_buffers)
        if self.asynchronous:
            views = self.views
            current = views.torch.cuda.current_stream(views.device)
            self.inputs_ready.record(current)
            views.stream.wait_event(self.inputs_ready)
            self.bucket.replay_async()  # queued on the session's stream; returns without waiting
            self.replayed.record(views.stream)
            current.wait_event(self.replayed)
            return self.outputs
        self._wait_for_writers()
        bucket = self.bucket
        bucket.session.session.run_with_iobinding(bucket.binding, bucket.options)
        return self.outputs

    def _copy_in(self, name: str, value: Any, buffer: Any) -> None:
        """An input replaced by assignment: its value goes into the buffer, which goes back in place."""
        if value is None:
            raise InvalidInputError(f"bound input {name!r} was removed from binding.inputs; write into its buffer "
                                    "instead, or bind again")
        if not hasattr(value, "shape"):
            value = np.asarray(value)
        check_same_kind(name, value, tuple(buffer.shape), buffer.dtype)
        if self.views is not None:
            torch = self.views.torch
            source = torch.from_dlpack(value) if is_device_array(value) else torch.from_numpy(np.ascontiguousarray(value))
            buffer.copy_(source)
        else:
            ort = self.runner.ort
            target = self.bucket.inputs[name]
            target.update_inplace(ort.OrtValue.from_dlpack(value) if is_device_array(value) else np.ascontiguousarray(value))
        self.inputs[name] = buffer

    def _wait_for_writers(self) -> None:
        """The session's own stream is not ordered after the caller's: wait for what wrote the inputs."""
        if self.views is not None:
            self.views.torch.cuda.current_stream(self.views.device).synchronize()
        else:
            synchronize_device(self.runner.device_id)

    def _run_on_worker(self) -> dict[str, Any]:
        results = self.runner.run(dict(self.inputs))
        for name, buffer in self.output_buffers.items():
            result = results[name]
            if self.views is not None:
                buffer.copy_(self.views.torch.from_dlpack(result))
            else:
                self.bucket.outputs[name].update_inplace(self.runner.ort.OrtValue.from_dlpack(result))
        self.outputs.update(self.output_buffers)
        self._wait_for_writers()
        return self.outputs
