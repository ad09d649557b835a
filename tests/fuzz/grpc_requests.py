"""Fuzz ``lite serve`` with mutated ModelInferRequests: ``python -m tests.fuzz.grpc_requests --count 100000``.

A real server (``python -m serving``, a subprocess on loopback, 1 MiB message limit) serves a
small repository: an FP32 identity, the same with dynamic batching, a model of six datatypes
(BYTES among them), a classifier with labels, and two versions of one model. Request ``i`` of a
run with seed ``s`` is a pure function of ``(s, i)``: a valid request for one of them, then one to
three edits of its fields (model name and version, input names, datatypes, shapes with huge,
negative and zero dimensions, typed ``contents`` beside or instead of ``raw_input_contents``, raw
byte counts, BYTES length prefixes, request, input and output parameters, the outputs list), or,
for one request in ten, byte-level edits of the serialized message (:mod:`tests.fuzz.mutate`).
Three in twenty go through ``ModelStreamInfer`` followed by a valid request on the same stream.

Each answer must be OK or a gRPC status the protocol documents for a bad request
(:data:`ACCEPTED`), with a message; DEADLINE_EXCEEDED is accepted when the server gives it (a
mutated ``timeout`` parameter of a few microseconds asks for it). A finding is any other status
(INTERNAL, UNKNOWN, UNAVAILABLE, a dropped connection, a request running past :data:`DEADLINE_S`), a stream answer of "internal
error", a stream that does not answer the valid request after the mutated one, a server that
died, or a valid request (sent every :data:`PROBE_EVERY` requests and at the end) answered wrongly.

The client is in its own process (this module, run by the CI test as a subprocess): it uses the
server's generated code, which cannot share a process with tritonclient's copy of the protocol.
``--replay INDEX`` prints request ``INDEX`` and the server's answer.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
import numpy as np

from serving._generated import inference_pb2 as pb
from tests.fuzz.mutate import INTERESTING_INTS, INTERESTING_TEXT, mutate_bytes, mutate_message
from tests.serving.conftest import classifier_model, identity_model, multi_model, start_server, write_config

MAX_MESSAGE = 1 << 20
SERVICE = "/inference.GRPCInferenceService/"
DEADLINE_S = 10.0
PROBE_EVERY = 100
STREAM_SHARE = 0.15
BYTES_SHARE = 0.1
C = grpc.StatusCode
ACCEPTED = {C.OK, C.INVALID_ARGUMENT, C.RESOURCE_EXHAUSTED, C.NOT_FOUND, C.UNIMPLEMENTED, C.FAILED_PRECONDITION,
            C.OUT_OF_RANGE}
SERVER_DEADLINE = "model "  # how the server's DEADLINE_EXCEEDED begins; the client's own says "Deadline Exceeded"
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


def _identity(model: str = "identity", rows: int = 1) -> pb.ModelInferRequest:
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
    _identity, lambda: _identity("batched", 3), _typed_identity, _multi, _classifier, _versioned)


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


# ----- sending and judging ----------------------------------------------------------------------


@dataclass
class Finding:
    index: int
    kind: str
    detail: str


@dataclass
class Report:
    seed: int
    requests: int = 0
    outcomes: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    probes: int = 0
    slowest_ms: float = 0.0
    seconds: float = 0.0
    rss_kb: tuple[int, int] = (0, 0)

    def summary(self) -> str:
        outcomes = ", ".join(f"{name} {count}" for name, count in self.outcomes.most_common())
        return (f"grpc {self.requests} requests  {len(self.findings)} findings  {self.probes} valid probes  "
                f"slowest {self.slowest_ms:.0f} ms  {self.seconds:.1f} s  server RSS {self.rss_kb[0] // 1024} -> "
                f"{self.rss_kb[1] // 1024} MiB  [{outcomes}]")

    def to_json(self) -> dict:
        fields = asdict(self)
        fields["outcomes"] = dict(self.outcomes.most_common())
        return fields


def _resident_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Client:
    def __init__(self, address: str) -> None:
        options = [("grpc.max_send_message_length", 8 * MAX_MESSAGE), ("grpc.max_receive_message_length", 8 * MAX_MESSAGE)]
        self.channel = grpc.insecure_channel(address, options=options)
        self.unary = self.channel.unary_unary(SERVICE + "ModelInfer", request_serializer=None,
                                              response_deserializer=pb.ModelInferResponse.FromString)
        self.stream = self.channel.stream_stream(SERVICE + "ModelStreamInfer", request_serializer=None,
                                                 response_deserializer=pb.ModelStreamInferResponse.FromString)

    def send(self, payload: bytes) -> tuple[str, str]:
        """(outcome, problem): the status code's name, and "" or why it is a finding."""
        try:
            self.unary(payload, timeout=DEADLINE_S)
            return "OK", ""
        except grpc.RpcError as err:
            code, details = err.code(), err.details() or ""
            if code == C.DEADLINE_EXCEEDED and details.startswith(SERVER_DEADLINE):
                return code.name, ""  # the request's own "timeout" parameter, answered by the server
            if code not in ACCEPTED:
                return code.name, f"{code.name}: {details[:500]}"
            if not details.strip():
                return code.name, f"{code.name} without a message"
            return code.name, ""

    def send_on_stream(self, payload: bytes, index: int) -> tuple[str, str]:
        """The mutated request, then a valid one on the same stream: that one must be answered."""
        probe = _identity()
        probe.id = f"fuzz-probe-{index}"
        answers = []
        try:
            for answer in self.stream(iter([payload, probe.SerializeToString()]), timeout=DEADLINE_S):
                answers.append(answer)
        except grpc.RpcError as err:
            code = err.code()
            if code not in ACCEPTED:
                return f"stream {code.name}", f"stream ended with {code.name}: {(err.details() or '')[:500]}"
            return f"stream {code.name}", ""  # an undecodable message ends the stream with its status
        errors = [a.error_message for a in answers if a.error_message]
        if any(message.startswith("internal error") for message in errors):
            return "stream internal error", next(m for m in errors if m.startswith("internal error"))[:500]
        probes = [a for a in answers if a.infer_response.id == probe.id and not a.error_message]
        if len(probes) != 1 or not _identity_answered(probes[0].infer_response):
            return "stream probe lost", f"the valid request after the mutated one was not answered: {errors[:2]}"
        return ("stream error_message" if errors else "stream OK"), ""

    def probe(self) -> str:
        """A valid request: "" when answered with the right values."""
        try:
            response = self.unary(_identity().SerializeToString(), timeout=DEADLINE_S)
        except grpc.RpcError as err:
            return f"valid request failed: {err.code().name}: {err.details()}"
        return "" if _identity_answered(response) else f"valid request answered wrongly: {response}"[:500]

    def close(self) -> None:
        self.channel.close()


def _identity_answered(response: pb.ModelInferResponse) -> bool:
    if len(response.raw_output_contents) != 1:
        return False
    return np.array_equal(np.frombuffer(response.raw_output_contents[0], np.float32), ROW.ravel())


def fuzz(count: int, seed: int = 0, start: int = 0, log: Callable[[str], None] | None = None) -> Report:
    """Send ``count`` mutated requests (indices ``start..start+count``) to a fresh server."""
    report = Report(seed)
    with tempfile.TemporaryDirectory(prefix="lite-grpc-fuzz-") as folder:
        server = start_server(make_repository(Path(folder)), "--max-message-bytes", str(MAX_MESSAGE))
        client = Client(server.address)
        began = time.monotonic()
        try:
            problem = client.probe()
            if problem:
                raise RuntimeError(f"the server does not answer a valid request before fuzzing: {problem}")
            first_rss = _resident_kb(server.process.pid)
            for index in range(start, start + count):
                how, payload = generate(seed, index)
                rng = random.Random(f"lite-grpc-route:{seed}:{index}")
                started = time.perf_counter()
                if rng.random() < STREAM_SHARE:
                    outcome, problem = client.send_on_stream(payload, index)
                else:
                    outcome, problem = client.send(payload)
                report.slowest_ms = max(report.slowest_ms, (time.perf_counter() - started) * 1000)
                report.requests += 1
                report.outcomes[outcome] += 1
                if problem:
                    report.findings.append(Finding(index, "status", f"{how}: {problem}"))
                if server.process.poll() is not None:
                    report.findings.append(Finding(index, "crash", "".join(server.logs[-30:])))
                    break
                if (index - start + 1) % PROBE_EVERY == 0 or index == start + count - 1:
                    report.probes += 1
                    problem = client.probe()
                    if problem:
                        report.findings.append(Finding(index, "probe", problem))
                    if log is not None and (index - start + 1) % (PROBE_EVERY * 50) == 0:
                        log(f"{index - start + 1} requests, {len(report.findings)} findings")
            report.rss_kb = (first_rss, _resident_kb(server.process.pid))
        finally:
            report.seconds = time.monotonic() - began
            client.close()
            code = server.stop()
            if code not in (0, None) and not any(f.kind == "crash" for f in report.findings):
                report.findings.append(Finding(-1, "exit", f"the server exited {code} at SIGTERM"))
    return report


def replay(seed: int, index: int) -> int:
    how, payload = generate(seed, index)
    request = pb.ModelInferRequest()
    try:
        request.ParseFromString(payload)
        print(f"request {index} ({how}):\n{request}"[:4000])
    except Exception as err:  # noqa: BLE001 - byte-level edits may make no message at all
        print(f"request {index} ({how}): not a message ({err}): {payload[:200]!r}")
    with tempfile.TemporaryDirectory(prefix="lite-grpc-fuzz-") as folder:
        server = start_server(make_repository(Path(folder)), "--max-message-bytes", str(MAX_MESSAGE))
        client = Client(server.address)
        try:
            print("answer:", client.send(payload), "then on a stream:", client.send_on_stream(payload, index))
        finally:
            client.close()
            server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.grpc_requests", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="send one request and print it and its answer")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.seed, args.replay)
    report = fuzz(args.count, args.seed, args.start, log=lambda text: print(text, file=sys.stderr, flush=True))
    print(report.summary())
    for finding in report.findings[:20]:
        print(f"  {finding.kind} at index {finding.index}: {finding.detail[:300]}")
    if args.report is not None:
        args.report.write_text(json.dumps(report.to_json(), indent=2))
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
