"""``Model.bind``: fixed input and output buffers for a caller that runs one set of shapes again and again.

    binding = model.bind({"input": first_batch})   # buffers shaped like these arrays, holding them
    for batch in stream_of_batches:
        binding.inputs["input"][...] = batch          # or .copy_(tensor) for PyTorch buffers
        logits = binding.run()["logits"]              # overwritten by the next run: copy to keep

This is ONNX Runtime's IOBinding and TensorRT's bindings, for lite: a real-time loop (a camera, a
microphone, a game) feeds the same shapes every call and wants nothing done per call but the
computation. On CUDA with CUDA graphs (``device="cuda"``) a bound run is the graph's replay alone:
the model's inputs are its own buffers, so no input copy, no output allocation and no input
validation happen per call; with PyTorch loaded the replay is queued on lite's stream and ordered
after the caller's current stream's work and before its next, as a PyTorch operation is. On every
other engine a bound run is ``predict`` on the input buffers, with the results in the same
``outputs`` dict: one API on every device.

A buffer can also be replaced instead of written into (``binding.inputs["x"] = new_array``): the
next run copies the new value in, after checking its shape and type, and puts the buffer back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from lite.errors import InvalidInputError


class Binding:
    """Input buffers to write into, ``run()``, and the outputs of the last run.

    ``inputs``: name -> a writable array (numpy on host engines; a PyTorch tensor or a
    :class:`lite.DeviceArray` on CUDA). ``outputs``: name -> the last run's results, the same dict
    every run; its arrays may be overwritten by the next run.
    """

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.outputs: dict[str, Any] = {}

    def run(self) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}: {tuple(value.shape)}" for name, value in self.inputs.items())
        return f"<lite.Binding {type(self).__name__.lstrip('_')} inputs=[{shapes}]>"


class PredictBinding(Binding):
    """Any engine: a run is ``predict`` on the input buffers (numpy copies of the examples; device
    arrays are kept as given, and replaced by assignment)."""

    def __init__(self, feeds: Mapping[str, Any], predict: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        super().__init__({name: _host_buffer(value) for name, value in feeds.items()})
        self.shapes = {name: (tuple(value.shape), getattr(value, "dtype", None)) for name, value in self.inputs.items()}
        self.predict = predict

    def run(self) -> dict[str, Any]:
        for name, (shape, dtype) in self.shapes.items():
            value = self.inputs.get(name)
            if value is None:
                raise InvalidInputError(f"bound input {name!r} was removed from binding.inputs; write into its "
                                        "buffer instead, or bind again")
            check_same_kind(name, value, shape, dtype)
        results = self.predict(dict(self.inputs))
        self.outputs.clear()
        self.outputs.update(results)
        return self.outputs


def _host_buffer(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return np.array(value, order="C", copy=True)  # the caller's array is never written
    return value


def check_same_kind(name: str, value: Any, shape: tuple[int, ...], dtype: Any) -> None:
    """A bound input keeps its shape and element type: the engine's buffers and plans are for them."""
    got = tuple(getattr(value, "shape", ()))
    got_dtype = getattr(value, "dtype", None)
    if got != shape or (dtype is not None and dtype_name(got_dtype) != dtype_name(dtype)):
        raise InvalidInputError(
            f"bound input {name!r} is now {dtype_name(got_dtype)}{list(got)}; it was bound as "
            f"{dtype_name(dtype)}{list(shape)}: write new "
            "values into the buffer (or assign an array of that shape and type), or bind again for other shapes")


def dtype_name(dtype: Any) -> str:
    """numpy's name of an element type, for numpy, CuPy and PyTorch alike ("torch.float16" -> "float16")."""
    return str(dtype).removeprefix("torch.")
