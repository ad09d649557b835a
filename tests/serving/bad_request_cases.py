"""The bad-request matrix's cases, as data: each malformed request, how it is sent, the status
code it must get and the words its message must hold (run by test_bad_request_matrix.py against
one server with a bearer token and a 1 MiB message limit).

Requests are built with tritonclient's own copy of the protocol (``tritonclient.grpc.service_pb2``)
and sent through raw gRPC stubs, because tritonclient refuses to send most of them. Requests
protobuf cannot even represent (invalid UTF-8 in a string field, bytes that are no message at all)
are serialized by hand and sent through generic gRPC calls.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

TOKEN = "matrix-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
MAX_MESSAGE = 1 << 20
SERVICE = "/inference.GRPCInferenceService/"
TIMEOUT = 20.0
ROW = np.arange(16, dtype=np.float32).reshape(1, 16)

C = grpc.StatusCode


def infer_request(model: str = "identity", *, name: str = "INPUT0", datatype: str = "FP32", shape=(1, 16),
                  raw: bytes | None = ROW.tobytes(), version: str = "") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, model_version=version, id="matrix")
    request.inputs.add(name=name, datatype=datatype, shape=list(shape))
    if raw is not None:
        request.raw_input_contents.append(raw)
    return request


def multi_request(**replace: tuple[str, list[int], bytes]) -> pb.ModelInferRequest:
    """A valid request for the ``multi`` model, with some inputs replaced by (datatype, shape, raw)."""
    strings = struct.pack("<I", 2) + b"ab" + struct.pack("<I", 1) + b"c"
    inputs = {
        "F16": ("FP16", [1, 3], np.zeros(3, np.float16).tobytes()),
        "I32": ("INT32", [1, 3], np.zeros(3, np.int32).tobytes()),
        "B": ("BOOL", [1, 3], b"\x00\x01\x00"),
        "S": ("BYTES", [1, 2], strings),
        "U8": ("UINT8", [1, 3], b"\x01\x02\x03"),
        "F64": ("FP64", [1, 3], np.zeros(3, np.float64).tobytes()),
    }
    inputs.update(replace)
    request = pb.ModelInferRequest(model_name="multi")
    for name, (datatype, shape, raw) in inputs.items():
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(raw)
    return request


def rejected(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def raw_unary(channel, method: str, payload: bytes, metadata=AUTH) -> grpc.RpcError:
    call = channel.unary_unary(SERVICE + method, request_serializer=None, response_deserializer=None)
    return rejected(lambda: call(payload, metadata=metadata, timeout=TIMEOUT))


# ----- the matrix --------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    send: Callable  # (stub, channel) -> grpc.RpcError
    code: grpc.StatusCode
    says: tuple[str, ...]  # substrings the message must contain


def infer(request: pb.ModelInferRequest, metadata=AUTH, timeout: float = TIMEOUT) -> Callable:
    return lambda stub, channel: rejected(lambda: stub.ModelInfer(request, metadata=metadata, timeout=timeout))


def unary(method: str, request, metadata=AUTH) -> Callable:
    return lambda stub, channel: rejected(lambda: getattr(stub, method)(request, metadata=metadata, timeout=TIMEOUT))


def _typed(datatype: str, field: str, values: list, shape=(1, 16)) -> pb.ModelInferRequest:
    request = infer_request(datatype=datatype, shape=shape, raw=None)
    getattr(request.inputs[0].contents, field).extend(values)
    return request


def _with(request: pb.ModelInferRequest, change: Callable[[pb.ModelInferRequest], None]) -> pb.ModelInferRequest:
    change(request)
    return request


def _utf8_broken(request: pb.ModelInferRequest, good: bytes, bad: bytes) -> bytes:
    """``request`` serialized, with the bytes ``good`` (same length as ``bad``) swapped for ``bad``."""
    data = request.SerializeToString()
    assert len(good) == len(bad) and data.count(good) == 1
    return data.replace(good, bad)


def _bytes_tensor(raw: bytes, shape=(1, 2)) -> pb.ModelInferRequest:
    return multi_request(S=("BYTES", list(shape), raw))


NOT_A_MESSAGE = ("the request is not a valid protobuf message",)
BAD_REQUEST = C.INVALID_ARGUMENT

CASES: list[Case] = [
    # -- datatypes --------------------------------------------------------------------------------
    *[Case(f"datatype-{name or 'empty'}", infer(infer_request(datatype=name)), BAD_REQUEST,
           (f"unknown datatype {name!r}", "expected one of BOOL"))
      for name in ("FP8", "", "fp32", "FLOAT32", "STRING", "INT128", "FP32 ", "BF17")],
    Case("datatype-mismatch", infer(infer_request(datatype="INT32")), BAD_REQUEST, ("datatype INT32", "expects FP32")),
    Case("datatype-mismatch-fp64", infer(infer_request(datatype="FP64", raw=np.zeros((1, 16)).tobytes())),
         BAD_REQUEST, ("datatype FP64", "expects FP32")),
    Case("typed-contents-for-fp16", infer(_typed("FP16", "fp32_contents", [0.0] * 16)), BAD_REQUEST,
         ("FP16 has no typed contents field",)),
    Case("typed-contents-count", infer(_typed("FP32", "fp32_contents", [0.0] * 15)), BAD_REQUEST,
         ("15 values in contents.fp32_contents", "needs 16")),
    Case("typed-contents-wrong-field", infer(_typed("FP32", "int_contents", [0] * 16)), BAD_REQUEST,
         ("0 values in contents.fp32_contents", "filled contents.int_contents (16 values), which is not FP32's")),
    Case("typed-contents-missing-for-fp16", lambda stub, channel: rejected(lambda: stub.ModelInfer(
        _with(multi_request(), lambda r: r.ClearField("raw_input_contents")), metadata=AUTH, timeout=TIMEOUT)),
        BAD_REQUEST, ("input 'F16': FP16 has no typed contents field",)),
    # -- shapes -----------------------------------------------------------------------------------
    Case("shape-negative-batch", infer(infer_request(shape=(-1, 16), raw=b"")), BAD_REQUEST, ("negative dimension",)),
    Case("shape-negative-feature", infer(infer_request(shape=(1, -16), raw=b"")), BAD_REQUEST, ("negative dimension",)),
    Case("shape-int64-min", infer(infer_request(shape=(-(1 << 63), 16), raw=b"")), BAD_REQUEST, ("negative dimension",)),
    Case("shape-zero-feature", infer(infer_request(shape=(1, 0), raw=b"")), BAD_REQUEST, ("shape [1, 0]", "[-1, 16]")),
    # A dimension past 2**31 - 1 is refused before the payload is looked at.
    Case("shape-overflowing-product", infer(infer_request(shape=((1 << 62), (1 << 62)))), BAD_REQUEST,
         (f"dimension {1 << 62} is larger than 2147483647",)),
    Case("shape-int64-max", infer(infer_request(shape=((1 << 63) - 1, 16))), BAD_REQUEST, ("larger than 2147483647",)),
    Case("shape-huge-tiny-payload", infer(infer_request(shape=(1 << 40, 16))), BAD_REQUEST,
         (f"dimension {1 << 40} is larger than 2147483647",)),
    Case("shape-huge-typed-payload", infer(_typed("FP32", "fp32_contents", [1.0], shape=(1 << 40, 16))), BAD_REQUEST,
         ("larger than 2147483647",)),
    # Zero elements, one dimension past 2**31 - 1, no contents: once INTERNAL ("array is too big").
    Case("shape-zero-times-huge-no-contents", infer(infer_request(shape=(0, 1 << 62, 1 << 28), raw=None)),
         BAD_REQUEST, ("larger than 2147483647",)),
    # Found by the structure-aware fuzzer: both once INTERNAL (numpy's ValueError).
    Case("shape-rank-102", infer(infer_request(shape=(1,) * 102, raw=None)), BAD_REQUEST, ("rank 102",)),
    Case("shape-zero-times-spanless", infer(_typed("FP32", "fp32_contents", [], shape=(1 << 28,) * 3 + (0, 1))),
         BAD_REQUEST, ("multiply past 2**62",)),
    Case("shape-rank-1", infer(infer_request(shape=(16,))), BAD_REQUEST, ("shape [16]", "[-1, 16]")),
    Case("shape-rank-3", infer(infer_request(shape=(1, 16, 1))), BAD_REQUEST, ("shape [1, 16, 1]",)),
    Case("shape-scalar", infer(infer_request(shape=(), raw=b"\x00" * 4)), BAD_REQUEST, ("shape []",)),
    Case("shape-wrong-feature", infer(infer_request(shape=(4, 4))), BAD_REQUEST, ("shape [4, 4]", "[-1, 16]")),
    Case("shape-batch-over-max", infer(infer_request("batched", shape=(9, 16), raw=b"\x00" * 576)), BAD_REQUEST,
         ("batch size 9",)),
    Case("shape-of-other-version", infer(infer_request("versioned", shape=(1, 3), raw=b"\x00" * 12, version="1")),
         BAD_REQUEST, ("shape [1, 3]", "[-1, 2]")),
    # -- raw byte counts --------------------------------------------------------------------------
    Case("raw-one-short", infer(infer_request(raw=b"\x00" * 63)), BAD_REQUEST, ("63 bytes of raw data", "needs 64")),
    Case("raw-one-long", infer(infer_request(raw=b"\x00" * 65)), BAD_REQUEST, ("65 bytes of raw data", "needs 64")),
    Case("raw-empty", infer(infer_request(raw=b"")), BAD_REQUEST, ("0 bytes of raw data", "needs 64")),
    Case("raw-fp16-odd", lambda stub, channel: rejected(lambda: stub.ModelInfer(
        multi_request(F16=("FP16", [1, 3], b"\x00" * 5)), metadata=AUTH, timeout=TIMEOUT)), BAD_REQUEST,
        ("input 'F16'", "5 bytes of raw data", "needs 6")),
    Case("raw-extra-entry", infer(_with(infer_request(), lambda r: r.raw_input_contents.append(b"\x00" * 64))),
         BAD_REQUEST, ("2 entries for 1 inputs",)),
    Case("raw-without-inputs", infer(_with(infer_request(), lambda r: r.ClearField("inputs"))), BAD_REQUEST,
         ("1 entries for 0 inputs",)),
    Case("raw-and-contents", infer(_with(infer_request(), lambda r: r.inputs[0].contents.fp32_contents.append(1.0))),
         BAD_REQUEST, ("sets contents while the request uses raw_input_contents",)),
    Case("raw-bool-not-0-or-1", lambda stub, channel: rejected(lambda: stub.ModelInfer(
        multi_request(B=("BOOL", [1, 3], b"\x00\x02\x01")), metadata=AUTH, timeout=TIMEOUT)), BAD_REQUEST,
        ("BOOL bytes must be 0 or 1",)),
    # -- BYTES tensors ----------------------------------------------------------------------------
    Case("bytes-truncated-prefix", infer(_bytes_tensor(b"\x03\x00")), BAD_REQUEST,
         ("ends inside a length prefix at byte 0",)),
    Case("bytes-truncated-second-prefix", infer(_bytes_tensor(b"\x01\x00\x00\x00a\x01\x00")), BAD_REQUEST,
         ("ends inside a length prefix at byte 5",)),
    Case("bytes-length-past-end", infer(_bytes_tensor(b"\x09\x00\x00\x00abc")), BAD_REQUEST,
         ("claims 9 bytes but only 3 remain",)),
    Case("bytes-length-4gib", infer(_bytes_tensor(b"\xff\xff\xff\xffabc")), BAD_REQUEST,
         ("claims 4294967295 bytes",)),
    Case("bytes-too-few-elements", infer(_bytes_tensor(b"\x01\x00\x00\x00a")), BAD_REQUEST,
         ("holds 1 elements, the shape needs 2",)),
    Case("bytes-too-many-elements", infer(_bytes_tensor(b"\x01\x00\x00\x00a" * 3)), BAD_REQUEST,
         ("holds 3 elements, the shape needs 2",)),
    Case("bytes-typed-count", infer(_typed("BYTES", "bytes_contents", [b"a", b"b", b"c"])), BAD_REQUEST,
         ("3 values in contents.bytes_contents", "needs 16")),
    # -- input and output names -------------------------------------------------------------------
    Case("input-duplicated", infer(_with(infer_request(), lambda r: (
        r.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16]), r.raw_input_contents.append(ROW.tobytes())))),
        BAD_REQUEST, ("input 'INPUT0' appears twice",)),
    Case("input-missing", infer(_with(multi_request(), lambda r: (r.inputs.pop(), r.raw_input_contents.pop()))),
         BAD_REQUEST, ("missing input(s)", "'F64'")),
    Case("input-none", infer(pb.ModelInferRequest(model_name="identity")), BAD_REQUEST, ("missing input(s)", "'INPUT0'")),
    Case("input-unknown", infer(infer_request(name="EXTRA")), BAD_REQUEST, ("unknown input(s) ['EXTRA']",)),
    Case("input-empty-name", infer(infer_request(name="")), BAD_REQUEST, ("unknown input(s) ['']",)),
    Case("input-wrong-case", infer(infer_request(name="input0")), BAD_REQUEST, ("unknown input(s) ['input0']",)),
    Case("output-unknown", infer(_with(infer_request(), lambda r: r.outputs.add(name="NOPE"))), BAD_REQUEST,
         ("unknown output 'NOPE'", "OUTPUT0")),
    Case("output-classification-zero", infer(_with(infer_request(), lambda r: setattr(
        r.outputs.add(name="OUTPUT0").parameters["classification"], "int64_param", 0))), BAD_REQUEST,
        ("classification must be a positive integer",)),
    Case("parameter-without-value", infer(_with(infer_request(), lambda r: r.parameters["priority"].SetInParent())),
         BAD_REQUEST, ("a parameter has no value set",)),
    Case("input-shared-memory-without-size", infer(_with(infer_request(), lambda r: setattr(
        r.inputs[0].parameters["shared_memory_region"], "string_param", "region0"))), BAD_REQUEST,
        ("needs both shared_memory_region and shared_memory_byte_size",)),
    Case("input-shared-memory-unknown-region", infer(_with(infer_request(), lambda r: (
        setattr(r.inputs[0].parameters["shared_memory_region"], "string_param", "region0"),
        setattr(r.inputs[0].parameters["shared_memory_byte_size"], "int64_param", 64)))), C.NOT_FOUND,
        ("no shared-memory region named 'region0'",)),
    # -- models and versions ----------------------------------------------------------------------
    Case("model-unknown", infer(infer_request("no-such-model")), C.NOT_FOUND, ("'no-such-model' is not loaded",)),
    Case("model-empty-name", infer(infer_request("")), BAD_REQUEST, ("invalid model name",)),
    Case("version-unknown", infer(infer_request(version="7")), C.NOT_FOUND, ("no version 7", "[1]")),
    Case("version-not-a-number", infer(infer_request(version="latest")), BAD_REQUEST,
         ("version 'latest' is not a positive integer",)),
    Case("version-negative", infer(infer_request(version="-1")), BAD_REQUEST, ("version '-1' is not a positive integer",)),
    Case("version-huge", infer(infer_request(version="9" * 30)), BAD_REQUEST, ("is not a positive integer of 1 to 18",)),
    Case("metadata-unknown-model", unary("ModelMetadata", pb.ModelMetadataRequest(name="ghost")), C.NOT_FOUND,
         ("'ghost' is not loaded",)),
    Case("config-unknown-version", unary("ModelConfig", pb.ModelConfigRequest(name="identity", version="3")),
         C.NOT_FOUND, ("no version 3",)),
    Case("statistics-unknown-model", unary("ModelStatistics", pb.ModelStatisticsRequest(name="ghost")), C.NOT_FOUND,
         ("'ghost'",)),
    Case("load-missing-model", unary("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="ghost")),
         C.NOT_FOUND, ("'ghost'",)),
    Case("unload-missing-model", unary("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="ghost")),
         C.NOT_FOUND, ("'ghost' is not loaded",)),
    # -- path traversal and invalid UTF-8 ---------------------------------------------------------
    *[Case(f"name-{label}", infer(infer_request(name_)), BAD_REQUEST, ("invalid model name",))
      for label, name_ in (("dotdot-slash", "../identity"), ("slash", "a/b"), ("dotdot", ".."), ("hidden", ".hidden"),
                           ("absolute", "/etc/passwd"), ("backslash", "..\\identity"), ("nul", "identity\x00"),
                           ("long", "m" * 5000))],
    Case("load-path-traversal", unary("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="../identity")),
         BAD_REQUEST, ("invalid model name",)),
    Case("metadata-path-traversal", unary("ModelMetadata", pb.ModelMetadataRequest(name="../../etc")), BAD_REQUEST,
         ("invalid model name",)),
    Case("utf8-model-name", lambda stub, channel: raw_unary(
        channel, "ModelInfer", _utf8_broken(infer_request("identitx"), b"identitx", b"identit\xff")),
        BAD_REQUEST, NOT_A_MESSAGE),
    Case("utf8-input-name", lambda stub, channel: raw_unary(
        channel, "ModelInfer", _utf8_broken(infer_request(name="INPUTX"), b"INPUTX", b"INPUT\xc3")),
        BAD_REQUEST, NOT_A_MESSAGE),
    Case("utf8-load-name", lambda stub, channel: raw_unary(
        channel, "RepositoryModelLoad",
        _utf8_broken(pb.RepositoryModelLoadRequest(model_name="modelx"), b"modelx", b"model\xfe")),
        BAD_REQUEST, NOT_A_MESSAGE),
    Case("not-a-message", lambda stub, channel: raw_unary(channel, "ModelInfer", b"\xff\xff\xff\xff\x0f"),
         BAD_REQUEST, (*NOT_A_MESSAGE, "send a serialized inference.ModelInferRequest")),
    Case("truncated-message", lambda stub, channel: raw_unary(
        channel, "ModelInfer", infer_request().SerializeToString()[:-10]), BAD_REQUEST, NOT_A_MESSAGE),
    # -- authentication ---------------------------------------------------------------------------
    Case("auth-missing", infer(infer_request(), metadata=()), C.UNAUTHENTICATED, ("missing or invalid bearer token",)),
    Case("auth-wrong-token", infer(infer_request(), metadata=(("authorization", "Bearer wrong"),)),
         C.UNAUTHENTICATED, ("missing or invalid bearer token",)),
    Case("auth-no-scheme", infer(infer_request(), metadata=(("authorization", TOKEN),)), C.UNAUTHENTICATED,
         ("missing or invalid bearer token",)),
    Case("auth-basic-scheme", infer(infer_request(), metadata=(("authorization", f"Basic {TOKEN}"),)),
         C.UNAUTHENTICATED, ("missing or invalid bearer token",)),
    Case("auth-token-prefix", infer(infer_request(), metadata=(("authorization", f"Bearer {TOKEN[:-1]}"),)),
         C.UNAUTHENTICATED, ("missing or invalid bearer token",)),
    Case("auth-other-header", infer(infer_request(), metadata=(("x-api-key", TOKEN),)), C.UNAUTHENTICATED,
         ("missing or invalid bearer token",)),
    Case("auth-server-live", unary("ServerLive", pb.ServerLiveRequest(), metadata=()), C.UNAUTHENTICATED,
         ("missing or invalid bearer token",)),
    Case("auth-repository-load", unary("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="identity"),
                                       metadata=()), C.UNAUTHENTICATED, ("missing or invalid bearer token",)),
    Case("auth-stream", lambda stub, channel: rejected(lambda: list(stub.ModelStreamInfer(
        iter([infer_request()]), timeout=TIMEOUT))), C.UNAUTHENTICATED, ("missing or invalid bearer token",)),
    # -- size limits ------------------------------------------------------------------------------
    Case("oversized-message", infer(infer_request(shape=(1, MAX_MESSAGE // 4 + 16), raw=b"\x00" * (MAX_MESSAGE + 64))),
         C.RESOURCE_EXHAUSTED, ("larger than max",)),
    Case("oversized-stream-message", lambda stub, channel: rejected(lambda: list(stub.ModelStreamInfer(
        iter([infer_request(raw=b"\x00" * (MAX_MESSAGE + 64))]), metadata=AUTH, timeout=TIMEOUT))),
        C.RESOURCE_EXHAUSTED, ("larger than max",)),
    # -- deadlines and cancellation ---------------------------------------------------------------
    Case("deadline-expired", infer(infer_request("slow", name="X", shape=(256, 512), raw=b"\x00" * (256 * 512 * 4)),
                                   timeout=0.001), C.DEADLINE_EXCEEDED, ("deadline",)),
    Case("deadline-on-stream", lambda stub, channel: rejected(lambda: list(stub.ModelStreamInfer(
        iter([infer_request("slow", name="X", shape=(256, 512), raw=b"\x00" * (256 * 512 * 4))] * 4),
        metadata=AUTH, timeout=0.001))), C.DEADLINE_EXCEEDED, ("deadline",)),
    Case("queue-timeout-parameter", infer(_with(
        infer_request("slow", name="X", shape=(256, 512), raw=b"\x00" * (256 * 512 * 4)),
        lambda r: setattr(r.parameters["timeout"], "int64_param", 1))), C.DEADLINE_EXCEEDED, ("deadline",)),
    Case("cancelled", lambda stub, channel: _cancelled(stub), C.CANCELLED, ("cancelled",)),
    Case("stream-cancelled", lambda stub, channel: _stream_cancelled(stub), C.CANCELLED, ("cancelled",)),
    # -- the stream -------------------------------------------------------------------------------
    Case("stream-not-a-message", lambda stub, channel: rejected(lambda: list(channel.stream_stream(
        SERVICE + "ModelStreamInfer", request_serializer=None, response_deserializer=None)(
        iter([b"\xff\xff\xff\xff\x0f"]), metadata=AUTH, timeout=TIMEOUT))), BAD_REQUEST,
        # The stream carries ModelInferRequest messages: there is no ModelStreamInferRequest.
        (*NOT_A_MESSAGE, "send a serialized inference.ModelInferRequest")),
]


def _cancelled(stub) -> grpc.Future:
    """The cancelled call itself: after ``cancel()`` it reports CANCELLED through code()/details()."""
    request = infer_request("slow", name="X", shape=(256, 512), raw=b"\x00" * (256 * 512 * 4))
    future = stub.ModelInfer.future(request, metadata=AUTH, timeout=TIMEOUT)
    assert future.cancel()  # at once: on an idle machine the slow model may finish within milliseconds
    with pytest.raises(grpc.FutureCancelledError):
        future.result()
    return future


def _stream_cancelled(stub) -> grpc.RpcError:
    def requests():
        yield infer_request()
        time.sleep(30)  # never reached: the call is cancelled while the client still streams

    call = stub.ModelStreamInfer(requests(), metadata=AUTH, timeout=TIMEOUT)
    next(call)
    call.cancel()
    return rejected(lambda: next(call))


@dataclass
class StreamCase:
    id: str
    request: pb.ModelInferRequest
    says: tuple[str, ...]


STREAM_CASES = [
    StreamCase("stream-unknown-model", infer_request("ghost"), ("'ghost' is not loaded",)),
    StreamCase("stream-unknown-datatype", infer_request(datatype="FP8"), ("unknown datatype 'FP8'",)),
    StreamCase("stream-raw-one-short", infer_request(raw=b"\x00" * 63), ("63 bytes of raw data",)),
    StreamCase("stream-negative-shape", infer_request(shape=(-1, 16), raw=b""), ("negative dimension",)),
    StreamCase("stream-bytes-truncated", _bytes_tensor(b"\x03\x00"), ("ends inside a length prefix",)),
    StreamCase("stream-path-traversal", infer_request("../identity"), ("invalid model name",)),
]
