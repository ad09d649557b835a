"""Protobuf messages <-> data plane types. No logic beyond the protocol's encoding rules.

Inputs arrive in ``raw_input_contents`` (one entry per input, in order) or in typed
``contents``; outputs always go out in ``raw_output_contents``, because tritonclient decodes
only that (``InferResult.as_numpy``). FP16 and BF16 have no typed field and travel raw only.
"""

from __future__ import annotations

import time

import numpy as np

from .._generated import inference_pb2 as pb
from ..datatypes import CONFIG_TYPE, datatype_of, decode_raw, element_count, encode_raw, numpy_dtype
from ..errors import InvalidRequestError, UnsupportedError
from ..model import ServedModel
from ..statistics import Duration, StatisticsSnapshot
from ..types import InferenceRequest, InferenceResponse, ModelIndexEntry, ParameterValue, RequestedOutput

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
_GPU = pb.ModelInstanceGroup.KIND_GPU


# ----- inference ------------------------------------------------------------------------------


def to_request(msg: pb.ModelInferRequest, time_remaining: float | None) -> InferenceRequest:
    # Every request comes through here: each protobuf field is read once, and empty repeated
    # fields and maps are skipped without building containers from them.
    raw = msg.raw_input_contents
    tensors = msg.inputs
    if raw and len(raw) != len(tensors):
        raise InvalidRequestError(
            f"raw_input_contents has {len(raw)} entries for {len(tensors)} inputs; give one per input, in order"
        )
    inputs: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(tensors):
        name = tensor.name
        if name in inputs:
            raise InvalidRequestError(f"input {name!r} appears twice in the request")
        if tensor.parameters and any(key in tensor.parameters for key in _SHARED_MEMORY):
            raise UnsupportedError(f"input {name!r}: shared-memory tensors are not supported by this server")
        if raw:
            if tensor.HasField("contents"):
                raise InvalidRequestError(f"input {name!r} sets contents while the request uses raw_input_contents")
            inputs[name] = decode_raw(raw[index], tensor.datatype, tuple(tensor.shape), name)
        else:
            inputs[name] = _decode_typed(tensor, tuple(tensor.shape), f"input {name!r}")
    parameters = {key: parameter_value(value) for key, value in msg.parameters.items()} if msg.parameters else {}
    outputs = [RequestedOutput(o.name, _classification(o)) for o in msg.outputs] if msg.outputs else []
    deadline = None
    if time_remaining is not None:
        deadline = time.monotonic() + time_remaining
    if parameters:
        timeout_us = parameters.get("timeout")
        if isinstance(timeout_us, int) and not isinstance(timeout_us, bool) and timeout_us > 0:
            queue_deadline = time.monotonic() + timeout_us / 1e6
            deadline = queue_deadline if deadline is None else min(deadline, queue_deadline)
    return InferenceRequest(msg.model_name, inputs, msg.model_version, msg.id, outputs, parameters, deadline)


def _decode_typed(tensor: pb.ModelInferRequest.InferInputTensor, shape: tuple, what: str) -> np.ndarray:
    dtype = numpy_dtype(tensor.datatype)
    field = _TYPED_FIELD.get(tensor.datatype)
    if field is None:
        raise InvalidRequestError(f"{what}: {tensor.datatype} has no typed contents field; send it in raw_input_contents")
    values = getattr(tensor.contents, field)
    count = element_count(shape, what)
    if len(values) != count:
        raise InvalidRequestError(
            f"{what}: {len(values)} values in contents.{field}, but shape {list(shape)} needs {count}"
        )
    if tensor.datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError as err:
        raise InvalidRequestError(f"{what}: a value does not fit {tensor.datatype}: {err}") from err


def _classification(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> int:
    if "classification" not in output.parameters:
        return 0
    value = parameter_value(output.parameters["classification"])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequestError(f"output {output.name!r}: classification must be a positive integer, got {value!r}")
    return value


def parameter_value(param: pb.InferParameter) -> ParameterValue:
    kind = param.WhichOneof("parameter_choice")
    if kind is None:
        raise InvalidRequestError("a parameter has no value set")
    return getattr(param, kind)


def set_parameter(target: pb.InferParameter, value: ParameterValue) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        if value >= 2**63:
            target.uint64_param = value
        else:
            target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def from_response(response: InferenceResponse, request_parameters: dict[str, ParameterValue]) -> pb.ModelInferResponse:
    msg = pb.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    # Built in place: a list of messages handed to the constructor is copied element by element.
    tensors, raw = msg.outputs, msg.raw_output_contents
    for name, array in response.outputs:
        tensors.add(name=name, datatype=datatype_of(array.dtype), shape=array.shape)
        raw.append(encode_raw(array))
    for key, value in request_parameters.items():
        if key not in _NOT_ECHOED:
            set_parameter(msg.parameters[key], value)
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
