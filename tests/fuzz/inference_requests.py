"""The requests ``lite serve``'s gRPC fuzzer sends (:mod:`tests.fuzz.grpc_requests`): valid
ModelInferRequests for its small repository, field-level edits of the kinds a client can get
wrong, and byte-level edits of the serialized message. Request ``index`` of a run with ``seed`` is
a pure function of ``(seed, index)`` (:func:`generate`), so any finding replays alone.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from serving._generated import inference_pb2 as pb
from tests.fuzz.mutate import INTERESTING_INTS, INTERESTING_TEXT, mutate_bytes, mutate_message
from tests.serving.conftest import classifier_model, identity_model, multi_model, write_config

BYTES_SHARE = 0.1
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
             "FP64", "BF16", "BYTES", "fp32", "FP8", "STRING", "", "FP32 ", "\u00e9")
PARAMETER_KEYS = ("classification", "binary_data", "binary_data_output", "binary_data_size", "timeout",
                  "priority", "sequence_id", "sequence_start", "shared_memory_region", "shared_memory_byte_size",
                  "shared_memory_offset", "headers", "unknown", "")
ROW = np.arange(16, dtype=np.float32).reshape(1, 16)


# ----- the repository and the valid requests --------------------------------------------------


def make_repository(root: Path) -> Path:
    identity_model(root / "identity" / "1" / "model.lite")
    identity_model(root / "batched" / "1" / "model.lite")
    write_config(root / "batched", {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 500}})
    multi_model(root / "multi" / "1" / "model.lite")
    classifier_model(root / "classifier" / "1" / "model.lite")
    write_config(root / "classifier", {"max_batch_size": 4})
    identity_model(root / "versioned" / "1" / "model.lite", shape=("N", 2))
    identity_model(root / "versioned" / "2" / "model.lite", shape=("N", 3))
    write_config(root / "versioned", {"version_policy": {"all": True}})
    return root


def _bytes_tensor(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def identity_request(model: str = "identity", rows: int = 1) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id="fuzz")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[rows, 16])
    request.raw_input_contents.append(np.tile(ROW, (rows, 1)).tobytes())
    request.outputs.add(name="OUTPUT0")
    return request


def _typed_identity() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    tensor.contents.fp32_contents.extend(ROW.ravel().tolist())
    return request


def _multi() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="multi")
    inputs = {
        "F16": ("FP16", [1, 3], np.ones(3, np.float16).tobytes()),
        "I32": ("INT32", [1, 3], np.arange(3, dtype=np.int32).tobytes()),
        "B": ("BOOL", [1, 3], b"\x00\x01\x00"),
        "S": ("BYTES", [1, 2], _bytes_tensor(b"ab", b"c")),
        "U8": ("UINT8", [1, 3], b"\x01\x02\x03"),
        "F64": ("FP64", [1, 3], np.zeros(3, np.float64).tobytes()),
    }
    for name, (datatype, shape, raw) in inputs.items():
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(raw)
        request.outputs.add(name=name + "_OUT")
    return request


def _classifier() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="classifier")
    request.inputs.add(name="LOGITS", datatype="FP32", shape=[2, 4])
    request.raw_input_contents.append(np.arange(8, dtype=np.float32).tobytes())
    request.outputs.add(name="PROBS").parameters["classification"].int64_param = 2
    return request


def _versioned() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="versioned", model_version="2")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 3])
    request.raw_input_contents.append(np.ones(6, np.float32).tobytes())
    return request


SEEDS: tuple[Callable[[], pb.ModelInferRequest], ...] = (
    identity_request, lambda: identity_request("batched", 3), _typed_identity, _multi, _classifier, _versioned)


# ----- field-level edits --------------------------------------------------------------------------


def _set_parameter(parameters, rng: random.Random) -> None:
    value = parameters[rng.choice(PARAMETER_KEYS)]
    kind = rng.randrange(5)
    if kind == 0:
        value.bool_param = rng.random() < 0.5
    elif kind == 1:
        value.int64_param = _int64(rng.choice(INTERESTING_INTS))
    elif kind == 2:
        value.string_param = rng.choice(INTERESTING_TEXT)
    elif kind == 3:
        value.double_param = rng.choice((0.0, -1.0, 1e300, float("nan"), float("inf")))
    else:
        value.uint64_param = rng.choice((0, 1, (1 << 64) - 1))


def _int64(value: int) -> int:
    """``value`` as protobuf's int64 holds it (the top of uint64 wraps to negatives)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _edit_shape(tensor, rng: random.Random) -> None:
    dims = list(tensor.shape)
    choice = rng.randrange(4)
    if choice == 0 and dims:
        dims[rng.randrange(len(dims))] = _int64(rng.choice(INTERESTING_INTS))
    elif choice == 1:
        dims.append(_int64(rng.choice((0, 1, 2, 1 << 31, 1 << 40, -1))))
    elif choice == 2 and dims:
        del dims[rng.randrange(len(dims))]
    else:
        dims = [_int64(rng.choice((0, 0, 1, 1 << 28, 1 << 62, -(1 << 63)))) for _ in range(rng.randint(0, 5))]
    del tensor.shape[:]
    tensor.shape.extend(dims)


def _edit_raw(request: pb.ModelInferRequest, rng: random.Random) -> None:
    raw = request.raw_input_contents
    if not raw:
        raw.append(b"\x00" * rng.choice((0, 1, 63, 64, 65)))
        return
    index = rng.randrange(len(raw))
    data = raw[index]
    choice = rng.randrange(6)
    if choice == 0:
        raw[index] = data[: rng.randrange(len(data) + 1)]
    elif choice == 1:
        raw[index] = data + b"\x00" * rng.choice((1, 3, 4, 8, 1000))
    elif choice == 2:
        del raw[index]
    elif choice == 3:
        raw.append(data)
    elif choice == 4:  # a BYTES length prefix that runs past the end, or a huge one
        raw[index] = struct.pack("<I", rng.choice((0, 5, 0xFFFFFFFF, 1 << 31, len(data)))) + data[4:]
    else:
        raw[index] = b""


def _edit_contents(tensor, rng: random.Random) -> None:
    fields = [f.name for f in pb.InferTensorContents.DESCRIPTOR.fields]
    name = rng.choice(fields)
    values = getattr(tensor.contents, name)
    count = rng.choice((0, 1, 3, 15, 16, 17, 100))
    if name == "bytes_contents":
        values.extend([b"ab"] * count)
    elif name == "bool_contents":
        values.extend([True] * count)
    elif name.startswith("fp"):
        values.extend([rng.choice((1.0, float("nan"), float("inf")))] * count)
    elif name.startswith("uint"):
        values.extend([rng.choice((0, 255, 256, 0xFFFFFFFF))] * count)
    else:
        values.extend([rng.choice((0, -1, 127, 128, -(1 << 31)))] * count)


def _edit(request: pb.ModelInferRequest, rng: random.Random) -> None:
    """One field-level edit of the kinds a client can get wrong."""
    choice = rng.randrange(12)
    tensor = rng.choice(request.inputs) if request.inputs else request.inputs.add(name="INPUT0")
    if choice == 0:
        request.model_name = rng.choice(("identity", "multi", "nope", "", "../identity", "identity\x00", "a" * 300,
                                         "versioned", "classifier", "batched"))
    elif choice == 1:
        request.model_version = rng.choice(("", "1", "2", "3", "-1", "0", "01", "abc", "9" * 30))
    elif choice == 2:
        tensor.name = rng.choice(("INPUT0", "OUTPUT0", "F16", "S", "", "nope", "\u00e9", "x" * 300))
    elif choice == 3:
        tensor.datatype = rng.choice(DATATYPES)
    elif choice in (4, 5):
        _edit_shape(tensor, rng)
    elif choice == 6:
        _edit_raw(request, rng)
    elif choice == 7:
        _edit_contents(tensor, rng)
    elif choice == 8:
        _set_parameter(rng.choice((request.parameters, tensor.parameters)), rng)
    elif choice == 9:
        outputs = request.outputs
        kind = rng.randrange(4)
        if kind == 0:
            outputs.add(name=rng.choice(("OUTPUT0", "PROBS", "nope", "", "INPUT0")))
        elif kind == 1 and outputs:
            outputs.append(outputs[rng.randrange(len(outputs))])
        elif kind == 2:
            output = outputs[rng.randrange(len(outputs))] if outputs else outputs.add(name="OUTPUT0")
            _set_parameter(output.parameters, rng)
        else:
            del outputs[:]
    elif choice == 10:  # inputs: drop one, duplicate one, or reverse their order against the raw contents
        kind = rng.randrange(3)
        if kind == 0 and request.inputs:
            del request.inputs[rng.randrange(len(request.inputs))]
        elif kind == 1:
            request.inputs.append(tensor)
        else:
            items = list(request.inputs)[::-1]
            del request.inputs[:]
            request.inputs.extend(items)
    else:
        mutate_message(request, rng, edits=1)


def generate(seed: int, index: int) -> tuple[str, bytes]:
    """Request ``index`` of a run with ``seed``: how it was made, and its serialized bytes."""
    rng = random.Random(f"lite-grpc-fuzz:{seed}:{index}")
    number = rng.randrange(len(SEEDS))
    request = SEEDS[number]()
    if rng.random() < BYTES_SHARE:
        return f"seed {number}, bytes", mutate_bytes(request.SerializeToString(), rng, [SEEDS[0]().SerializeToString()])
    edits = rng.choice((1, 1, 2, 3))
    for _ in range(edits):
        _edit(request, rng)
    return f"seed {number}, {edits} edits", request.SerializePartialToString()
