"""What one request may make the server allocate, checked before the model runs.

The message size limit (``max_message_bytes``) bounds the bytes a request carries, not the
memory it asks for: a tensor's shape is declared, and a tensor with a zero dimension carries no
data whatever its other dimensions are. An input of shape ``[2**28, 0]`` is 34 bytes on the
wire; a model that reduces over the empty axis, or multiplies it with another empty input,
answers with 2**28 values. So, before a request runs:

- no dimension of an input may exceed 2**31 - 1 (INVALID_ARGUMENT), and the product of an
  input's non-zero dimensions may not exceed ``max_tensor_elements`` (RESOURCE_EXHAUSTED): no
  shape claims more elements than a tensor that fills a message could hold;
- where the model's declared output shape ties an output's dimensions to the inputs' (a symbol
  such as ``"N"`` that an input also has, or a fixed size), the output's size is predicted from
  the request: no output may exceed ``max_tensor_elements`` elements, and the outputs that would
  be answered may not exceed ``max_message_bytes`` together (the answer could not be sent
  anyway). Outputs whose shape the model leaves open (data-dependent sizes) are not predicted.

After the model runs, the answer itself is measured (:meth:`RequestLimits.check_answer`): an
output whose size depends on the data (an OCR model's output grows with the image's width) may
still exceed ``max_tensor_elements``, or the answer ``max_message_bytes``. Sent as it is, gRPC
would fail the call with its own RESOURCE_EXHAUSTED and the server would count it a success; so
the server refuses it with a RESOURCE_EXHAUSTED of its own that names the outputs.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .datatypes import MAX_DIMENSION, dimension_too_large, numpy_dtype
from .errors import ResourceExhaustedError
from .types import InferenceResponse, ParameterValue, RequestedOutput, TensorInfo

_BYTES_ELEMENT = 4  # a BYTES element is at least its 4-byte length prefix on the wire
# Bytes of the answer's protobuf framing beyond the tensor data, at most: a field's tag and length
# take up to 6 bytes, a shape dimension up to 10, and a message has a few such fields.
_FIELD_OVERHEAD = 16
_DIMENSION_OVERHEAD = 10


@dataclass(frozen=True)
class _PredictedOutput:
    """An output whose size follows from the inputs' shapes: ``fixed`` times the input
    dimensions named by ``bound`` (input name, axis)."""

    name: str
    fixed: int
    bound: tuple[tuple[str, int], ...]
    itemsize: int
    dims: tuple  # the declared dimensions, for messages


class OutputPrediction:
    """The outputs of one served model whose sizes the request's input shapes determine."""

    def __init__(self, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> None:
        symbols: dict[str, tuple[str, int]] = {}
        for info in inputs:
            for axis, dim in enumerate(info.dims):
                if isinstance(dim, str):
                    symbols.setdefault(dim, (info.name, axis))
        self.outputs = tuple(
            predicted for info in outputs if (predicted := _predict(info, symbols)) is not None
        )


def _predict(info: TensorInfo, symbols: dict[str, tuple[str, int]]) -> _PredictedOutput | None:
    if not info.dims:
        return None  # rank unknown
    fixed, bound = 1, []
    for dim in info.dims:
        if isinstance(dim, int):
            fixed *= dim
        elif isinstance(dim, str) and dim in symbols:
            bound.append(symbols[dim])
        else:
            return None  # a size no input determines
    itemsize = _BYTES_ELEMENT if info.datatype == "BYTES" else numpy_dtype(info.datatype).itemsize
    return _PredictedOutput(info.name, fixed, tuple(bound), itemsize, info.dims)


class RequestLimits:
    """The checks above, with the server's limits; one per data plane."""

    def __init__(self, max_elements: int, max_answer_bytes: int) -> None:
        self.max_elements = max_elements
        self.max_answer_bytes = max_answer_bytes
        # A tensor with data and at most this many elements passes without looking at its
        # dimensions: none of them can be larger than its element count.
        self._plainly_small = min(max_elements, MAX_DIMENSION)
        self._predictions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def check(self, model, inputs: dict[str, np.ndarray], wanted: list[RequestedOutput]) -> None:
        """Raise unless ``inputs`` (served names) fit the limits, and so do the outputs ``model``
        (a ServedModel: ``name``, ``inputs``, ``outputs``) would make from them."""
        for name, array in inputs.items():
            if not 0 < array.size <= self._plainly_small:
                self._check_claimed(model.name, name, array.shape)
        prediction = self._predictions.get(model)
        if prediction is None:
            prediction = self._predictions[model] = OutputPrediction(model.inputs, model.outputs)
        if prediction.outputs:
            self._check_outputs(model.name, prediction, inputs, wanted)

    def _check_claimed(self, model: str, name: str, shape: tuple[int, ...]) -> None:
        claimed = 1
        for dim in shape:
            if dim > MAX_DIMENSION:
                raise dimension_too_large(shape, dim, f"model {model}: input {name!r}")
            if dim > 0:
                claimed *= dim
        if claimed > self.max_elements:
            raise ResourceExhaustedError(
                f"model {model}: input {name!r} has shape {list(shape)}, {claimed} elements counting its non-zero "
                f"dimensions; the server's limit is {self.max_elements} elements per tensor (max_tensor_elements); "
                "send smaller tensors"
            )

    def _check_outputs(self, model: str, prediction: OutputPrediction, inputs: dict[str, np.ndarray],
                       wanted: list[RequestedOutput]) -> None:
        # Classified outputs answer a few labels; outputs written to shared memory answer nothing.
        answered = {o.name for o in wanted if not o.classification and o.shared_memory is None} if wanted else None
        answer_bytes, largest, largest_bytes = 0, "", -1
        for output in prediction.outputs:
            elements = output.fixed
            for input_name, axis in output.bound:
                array = inputs.get(input_name)
                if array is None or axis >= array.ndim:
                    break  # the request does not match the signature: the model refuses it, naming why
                elements *= array.shape[axis]
            else:
                if elements > self.max_elements:
                    raise ResourceExhaustedError(
                        f"model {model}: output {output.name!r} (declared {list(output.dims)}) would have "
                        f"{elements} elements for these input shapes; the server's limit is {self.max_elements} "
                        "elements per tensor (max_tensor_elements); send smaller inputs"
                    )
                if answered is None or output.name in answered:
                    size = elements * output.itemsize
                    answer_bytes += size
                    if size > largest_bytes:
                        largest, largest_bytes = output.name, size
        if answer_bytes > self.max_answer_bytes:
            raise ResourceExhaustedError(
                f"model {model}: the answer would hold {answer_bytes} bytes of output data ({largest_bytes} of "
                f"them output {largest!r}) for these input shapes, more than max_message_bytes {self.max_answer_bytes}; "
                "send a smaller batch or request fewer outputs"
            )

    def check_answer(self, model: str, outputs: dict[str, np.ndarray], answer: InferenceResponse,
                     wanted: list[RequestedOutput], parameters: dict[str, ParameterValue]) -> None:
        """Raise unless every output the model made (``outputs``) holds at most
        ``max_tensor_elements`` elements and ``answer`` fits one message of ``max_message_bytes``
        (its tensor data, outputs written to shared memory not counted, and an upper bound of its
        framing: names, shapes, the echoed ``parameters``)."""
        for name, array in outputs.items():
            if array.size > self.max_elements:
                raise ResourceExhaustedError(
                    f"model {model}: output {name!r} has shape {list(array.shape)}, {array.size} elements for these "
                    f"inputs; the server's limit is {self.max_elements} elements per tensor (max_tensor_elements): "
                    "send smaller inputs, or raise --max-tensor-elements (LITE_MAX_TENSOR_ELEMENTS) on the server"
                )
        in_memory = {o.name for o in wanted if o.shared_memory is not None}
        sizes = {name: wire_bytes(array) for name, array in answer.outputs if name not in in_memory}
        framing = _FIELD_OVERHEAD * 4 + len(answer.model_name) + len(answer.model_version) + len(answer.id)
        for name, array in answer.outputs:
            framing += _FIELD_OVERHEAD * 4 + 2 * len(name) + _DIMENSION_OVERHEAD * array.ndim
        for key, value in parameters.items():
            framing += _FIELD_OVERHEAD * 2 + len(key) + (len(value) if isinstance(value, str) else 10)
        total = sum(sizes.values()) + framing
        if total > self.max_answer_bytes:
            largest = sorted(sizes.items(), key=lambda item: -item[1])[:4]
            named = ", ".join(f"output {name!r} {size} bytes" for name, size in largest)
            raise ResourceExhaustedError(
                f"model {model}: the answer would be {total} bytes ({named}), more than the server's "
                f"max_message_bytes {self.max_answer_bytes}: send smaller inputs or request fewer outputs, or raise "
                "--max-message-bytes (LITE_MAX_MESSAGE_BYTES) on the server (and the client's receive limit)"
            )


def wire_bytes(array: np.ndarray) -> int:
    """The bytes ``array`` takes in ``raw_output_contents``: BYTES elements with their length prefix."""
    if array.dtype.kind in ("O", "U", "S"):
        return sum(_BYTES_ELEMENT + len(item.encode("utf-8") if isinstance(item, str) else bytes(item))
                   for item in np.asarray(array, dtype=object).reshape(-1))
    return array.nbytes
