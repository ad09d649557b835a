"""Protobuf messages <-> data plane types. No logic beyond the protocol's encoding rules.

Inputs arrive in ``raw_input_contents`` (one entry per input not in shared memory, in order), in
typed ``contents``, or in a registered shared-memory region named by the input's parameters;
outputs go out in ``raw_output_contents``, because tritonclient decodes only that
(``InferResult.as_numpy``), except those requested in shared memory, which are written there and
answered with an empty entry (so the entries stay aligned with the outputs, as Triton answers).
FP16 and BF16 have no typed field and travel raw only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np

from .._generated import inference_pb2 as pb
from ..datatypes import CONFIG_TYPE, datatype_of, decode_raw, element_count, encode_raw, numpy_dtype
from ..errors import InvalidRequestError, ResourceExhaustedError, UnsupportedError
from ..model import ServedModel
from ..shared_memory import Region, RegionSlice, SharedMemoryRegistry
from ..statistics import Duration, StatisticsSnapshot
from ..types import InferenceRequest, InferenceResponse, ModelIndexEntry, ParameterValue, RequestedOutput
from ..versions import shown

_TYPED_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_SHARED_MEMORY = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")
_NOT_ECHOED = ("headers",)
# The most inputs, requested outputs and parameters a request may carry, each: they are decoded on
# the event loop before the model is consulted, and a request of a million empty inputs (20 MB, well
# within the message limit) held every other client for 15 s. No model served here has this many.
MAX_REQUEST_ENTRIES = 4096
_GPU = pb.ModelInstanceGroup.KIND_GPU


# ----- inference ------------------------------------------------------------------------------


def to_request(msg: pb.ModelInferRequest, time_remaining: float | None,
               shared_memory: SharedMemoryRegistry | None = None) -> InferenceRequest:
    # Every request comes through here: each protobuf field is read once, and empty repeated
    # fields and maps are skipped without building containers from them.
    raw = msg.raw_input_contents
    tensors = msg.inputs
    _check_entry_counts(msg)
    shared = _shared_inputs(tensors, shared_memory)
    if raw and len(raw) != len(tensors) - len(shared or ()):
        in_memory = f" ({len(shared)} of them in shared memory)" if shared else ""
        raise InvalidRequestError(
            f"raw_input_contents has {len(raw)} entries for {len(tensors)} inputs{in_memory}; give one per input "
            "not in shared memory, in order"
        )
    if shared:
        shared_memory.check_request_bytes(shared.values(), sum(len(contents) for contents in raw))
    inputs: dict[str, np.ndarray] = {}
    next_raw = 0
    for index, tensor in enumerate(tensors):
        name = tensor.name
        if name in inputs:
            raise InvalidRequestError(f"input {name!r} appears twice in the request")
        if shared and index in shared:
            if tensor.HasField("contents"):
                raise InvalidRequestError(f"input {name!r} sets contents while its data is in shared memory")
            data = shared_memory.read_tensor(shared[index], tensor.datatype, tuple(tensor.shape), f"input {name!r}")
            inputs[name] = decode_raw(data, tensor.datatype, tuple(tensor.shape), name)
        elif raw:
            if tensor.HasField("contents"):
                raise InvalidRequestError(f"input {name!r} sets contents while the request uses raw_input_contents")
            inputs[name] = decode_raw(raw[next_raw], tensor.datatype, tuple(tensor.shape), name)
            next_raw += 1
        else:
            inputs[name] = _decode_typed(tensor, tuple(tensor.shape), f"input {name!r}")
    parameters = {key: parameter_value(value) for key, value in msg.parameters.items()} if msg.parameters else {}
    outputs = _requested_outputs(msg.outputs, shared_memory) if msg.outputs else []
    deadline = None
    if time_remaining is not None:
        deadline = time.monotonic() + time_remaining
    if parameters:
        _check_reserved(parameters)
        timeout_us = parameters.get("timeout")
        if timeout_us:
            queue_deadline = time.monotonic() + timeout_us / 1e6
            deadline = queue_deadline if deadline is None else min(deadline, queue_deadline)
    return InferenceRequest(msg.model_name, inputs, msg.model_version, msg.id, outputs, parameters, deadline)


def _check_entry_counts(msg: pb.ModelInferRequest) -> None:
    for what, count in (("inputs", len(msg.inputs)), ("requested outputs", len(msg.outputs)),
                        ("parameters", len(msg.parameters))):
        if count > MAX_REQUEST_ENTRIES:
            raise ResourceExhaustedError(
                f"the request has {count} {what}, more than the server takes ({MAX_REQUEST_ENTRIES}); a model's "
                "inputs and outputs are listed by ModelMetadata"
            )


def _is_count(value: ParameterValue) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# The request parameters the protocol gives a meaning (Triton's gRPC front end reads them and
# refuses a value of another kind), with what each must be. Ignoring a value of the wrong kind
# would serve the request as if the client had not asked: a "timeout" sent as a string would
# leave the request without the queue timeout the client set.
_RESERVED: dict[str, tuple[str, Callable[[ParameterValue], bool]]] = {
    "timeout": ("an integer >= 0 (microseconds; 0: none)", _is_count),
    "priority": ("an integer >= 0", _is_count),
    "sequence_id": ("an integer >= 0 or a string", lambda value: _is_count(value) or isinstance(value, str)),
    "sequence_start": ("a boolean", lambda value: isinstance(value, bool)),
    "sequence_end": ("a boolean", lambda value: isinstance(value, bool)),
    "binary_data_output": ("a boolean", lambda value: isinstance(value, bool)),
}


def _check_reserved(parameters: dict[str, ParameterValue]) -> None:
    for key, (expected, fits) in _RESERVED.items():
        value = parameters.get(key)
        if value is not None and not fits(value):
            given = shown(value) if isinstance(value, str) else repr(value)
            raise InvalidRequestError(f"parameter {key!r} must be {expected}, got {given}")


def _shared_inputs(tensors, shared_memory: SharedMemoryRegistry | None) -> dict[int, RegionSlice] | None:
    """The inputs whose parameters name a shared-memory region: index -> where their bytes are."""
    shared = None
    for index, tensor in enumerate(tensors):
        if tensor.parameters and any(key in tensor.parameters for key in _SHARED_MEMORY):
            if shared is None:
                shared = {}
            shared[index] = _region_slice(tensor.parameters, f"input {tensor.name!r}", shared_memory)
    return shared


def _requested_outputs(tensors, shared_memory: SharedMemoryRegistry | None) -> list[RequestedOutput]:
    """The outputs the request asks for, each once: an output named twice would be answered twice
    under one name (or once in shared memory and once in the message), and clients look outputs up
    by name, so which copy they read would be an accident (Triton refuses it too)."""
    outputs = []
    names = set()
    for tensor in tensors:
        if tensor.name in names:
            raise InvalidRequestError(f"output {shown(tensor.name)} is requested twice; name each output once")
        names.add(tensor.name)
        outputs.append(_requested_output(tensor, shared_memory))
    return outputs


def _requested_output(output: pb.ModelInferRequest.InferRequestedOutputTensor,
                      shared_memory: SharedMemoryRegistry | None) -> RequestedOutput:
    target = None
    if output.parameters and any(key in output.parameters for key in _SHARED_MEMORY):
        target = _region_slice(output.parameters, f"output {output.name!r}", shared_memory)
    return RequestedOutput(output.name, _classification(output), target)


def _region_slice(parameters, what: str, shared_memory: SharedMemoryRegistry | None) -> RegionSlice:
    """Where the tensor's parameters say its bytes are (Triton: shared_memory_region, _byte_size and
    the optional _offset)."""
    if shared_memory is None:  # a caller without the server's registry (a benchmark of the codec)
        raise UnsupportedError(f"{what}: shared-memory tensors need a server's shared-memory registry")
    if "shared_memory_region" not in parameters or "shared_memory_byte_size" not in parameters:
        raise InvalidRequestError(
            f"{what}: shared memory needs both shared_memory_region and shared_memory_byte_size parameters"
        )
    region = parameter_value(parameters["shared_memory_region"])
    if not isinstance(region, str):
        raise InvalidRequestError(f"{what}: shared_memory_region must be a string parameter, got {region!r}")
    byte_size = _byte_count(parameters["shared_memory_byte_size"], "shared_memory_byte_size", what)
    offset = 0
    if "shared_memory_offset" in parameters:
        offset = _byte_count(parameters["shared_memory_offset"], "shared_memory_offset", what)
    return shared_memory.get(region, what).locate(offset, byte_size, what)


def _byte_count(param: pb.InferParameter, key: str, what: str) -> int:
    value = parameter_value(param)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequestError(f"{what}: {key} must be an integer >= 0, got {value!r}")
    return value


_CONTENT_FIELDS = ("bool_contents", "int_contents", "int64_contents", "uint_contents", "uint64_contents",
                   "fp32_contents", "fp64_contents", "bytes_contents")


def _decode_typed(tensor: pb.ModelInferRequest.InferInputTensor, shape: tuple, what: str) -> np.ndarray:
    dtype = numpy_dtype(tensor.datatype)
    field = _TYPED_FIELD.get(tensor.datatype)
    if field is None:
        raise InvalidRequestError(f"{what}: {tensor.datatype} has no typed contents field; send it in raw_input_contents")
    values = getattr(tensor.contents, field)
    count = element_count(shape, what)
    if len(values) != count:
        others = [f"contents.{name} ({len(getattr(tensor.contents, name))} values)" for name in _CONTENT_FIELDS
                  if name != field and len(getattr(tensor.contents, name))]
        sent = f"; the request filled {', '.join(others)}, which is not {tensor.datatype}'s field" if others else ""
        raise InvalidRequestError(
            f"{what}: {len(values)} values in contents.{field}, but shape {list(shape)} needs {count}{sent}"
        )
    if tensor.datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError as err:
        raise InvalidRequestError(f"{what}: a value does not fit {tensor.datatype}: {err}") from err


# The parameter of a requested output that asks for the top classes: Triton's "classification",
# and "class_count", the name tritonclient's InferRequestedOutput gives it, which clients also
# send by hand. Either must be a positive integer; ignoring a bad one would answer the whole tensor.
_CLASSIFICATION_KEYS = ("classification", "class_count")


def _classification(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> int:
    if not output.parameters:
        return 0
    counts = {}
    for key in _CLASSIFICATION_KEYS:
        if key in output.parameters:
            value = parameter_value(output.parameters[key])
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequestError(
                    f"output {output.name!r}: parameter {key} must be a positive integer (the number of top "
                    f"classes to answer), got {value!r}"
                )
            counts[key] = value
    if len(set(counts.values())) > 1:
        raise InvalidRequestError(
            f"output {shown(output.name)}: parameters 'classification' {counts['classification']} and 'class_count' "
            f"{counts['class_count']} disagree; give one of them"
        )
    return next(iter(counts.values()), 0)


def parameter_value(param: pb.InferParameter) -> ParameterValue:
    kind = param.WhichOneof("parameter_choice")
    if kind is None:
        raise InvalidRequestError("a parameter has no value set")
    return getattr(param, kind)


def from_response(response: InferenceResponse, request_parameters: Mapping[str, pb.InferParameter],
                  requested: list[RequestedOutput] | None = None) -> pb.ModelInferResponse:
    """The answer; outputs that ``requested`` puts in shared memory are written there.

    ``request_parameters``: the request message's own parameters, echoed as they came, each of its
    kind: a value alone cannot tell ``uint64_param`` 5 from ``int64_param`` 5."""
    msg = pb.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    targets = {o.name: o.shared_memory for o in requested if o.shared_memory is not None} if requested else None
    # Built in place: a list of messages handed to the constructor is copied element by element.
    tensors, raw = msg.outputs, msg.raw_output_contents
    for name, array in response.outputs:
        tensors.add(name=name, datatype=datatype_of(array.dtype), shape=array.shape)
        target = targets.get(name) if targets else None
        if target is None:
            raw.append(encode_raw(array))
        else:
            target.write(array, f"output {name!r}")
            raw.append(b"")
    for key, value in request_parameters.items():
        if key not in _NOT_ECHOED:
            msg.parameters[key].CopyFrom(value)
    return msg


# ----- metadata, config, statistics, repository ---------------------------------------------


def model_metadata(model: ServedModel, versions: list[str]) -> pb.ModelMetadataResponse:
    tensor = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=model.name,
        versions=versions,
        platform="lite",
        inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in model.inputs],
        outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in model.outputs],
    )


def model_config(model: ServedModel) -> pb.ModelConfigResponse:
    """Triton's ModelConfig: dims exclude the batch dimension when max_batch_size > 0."""
    config = model.config
    batched = config.max_batch_size > 0

    def dims(shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape[1:] if batched else shape

    policy = pb.ModelVersionPolicy()
    if config.version_policy.all:
        policy.all.SetInParent()
    elif config.version_policy.specific:
        policy.specific.versions.extend(config.version_policy.specific)
    else:
        policy.latest.num_versions = config.version_policy.latest
    msg = pb.ModelConfig(
        name=model.name,
        platform="lite",
        backend="lite",
        version_policy=policy,
        max_batch_size=config.max_batch_size,
        input=[pb.ModelInput(name=t.name, data_type=CONFIG_TYPE[t.datatype], dims=dims(t.shape)) for t in model.inputs],
        output=[pb.ModelOutput(name=t.name, data_type=CONFIG_TYPE[t.datatype], dims=dims(t.shape)) for t in model.outputs],
        instance_group=[pb.ModelInstanceGroup(
            name=f"{model.name}_0",
            count=model.instances,
            kind=_GPU if model.on_gpu else pb.ModelInstanceGroup.KIND_CPU,
        )],
        default_model_filename="model.lite",
    )
    if config.dynamic_batching is not None:
        msg.dynamic_batching.preferred_batch_size.extend(config.dynamic_batching.preferred_batch_sizes)
        msg.dynamic_batching.max_queue_delay_microseconds = config.dynamic_batching.max_queue_delay_us
        msg.dynamic_batching.default_queue_policy.max_queue_size = model.max_queue_size
    if config.preprocessing:
        msg.parameters["preprocessing"].string_value = config.preprocessing
    for key, value in model.tensor_metadata.items():
        msg.parameters[key].string_value = value
    return pb.ModelConfigResponse(config=msg)


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def model_statistics(snapshots: list[StatisticsSnapshot]) -> pb.ModelStatisticsResponse:
    stats = []
    for s in snapshots:
        stats.append(pb.ModelStatistics(
            name=s.name,
            version=s.version,
            last_inference=s.last_inference_ms,
            inference_count=s.inference_count,
            execution_count=s.execution_count,
            inference_stats=pb.InferStatistics(
                success=_duration(s.success),
                fail=_duration(s.fail),
                queue=_duration(s.queue),
                compute_input=_duration(s.compute_input),
                compute_infer=_duration(s.compute_infer),
                compute_output=_duration(s.compute_output),
            ),
            batch_stats=[
                pb.InferBatchStatistics(
                    batch_size=size,
                    compute_input=_duration(b.compute_input),
                    compute_infer=_duration(b.compute_infer),
                    compute_output=_duration(b.compute_output),
                )
                for size, b in s.batches.items()
            ],
        ))
    return pb.ModelStatisticsResponse(model_stats=stats)


def repository_index(entries: list[ModelIndexEntry]) -> pb.RepositoryIndexResponse:
    index = pb.RepositoryIndexResponse.ModelIndex
    return pb.RepositoryIndexResponse(
        models=[index(name=e.name, version=e.version, state=e.state, reason=e.reason) for e in entries]
    )


def shared_memory_status(regions: list[Region]) -> pb.SystemSharedMemoryStatusResponse:
    msg = pb.SystemSharedMemoryStatusResponse()
    for region in regions:
        msg.regions[region.name].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(
            name=region.name, key=region.key, offset=region.offset, byte_size=region.byte_size,
        ))
    return msg


def load_overrides(msg: pb.RepositoryModelLoadRequest) -> list[str]:
    """The parameters of a load that would replace what the repository holds: Triton's ``config``
    (a configuration in JSON) and ``file:<path>`` (a model file's content)."""
    return sorted(key for key in msg.parameters if key == "config" or key.startswith("file:"))
