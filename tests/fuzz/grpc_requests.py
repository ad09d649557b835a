"""Fuzz ``lite serve`` with mutated ModelInferRequests: ``python -m tests.fuzz.grpc_requests --count 100000``.

A real server (``python -m serving``, a subprocess on loopback, 1 MiB message limit) serves a
small repository: an FP32 identity, the same with dynamic batching, a model of six datatypes
(BYTES among them), a classifier with labels, and two versions of one model. Request ``i`` of a
run with seed ``s`` is a pure function of ``(s, i)``: a valid request for one of them, then one to
three edits of its fields (model name and version, input names, datatypes, shapes with huge,
negative and zero dimensions, typed ``contents`` beside or instead of ``raw_input_contents``, raw
byte counts, BYTES length prefixes, request, input and output parameters, the outputs list), or,
for one request in ten, byte-level edits of the serialized message (:mod:`tests.fuzz.mutate`); the
requests are made in :mod:`tests.fuzz.inference_requests`.
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
from tests.fuzz.inference_requests import ROW, generate, identity_request, make_repository
from tests.serving.conftest import start_server

MAX_MESSAGE = 1 << 20
SERVICE = "/inference.GRPCInferenceService/"
DEADLINE_S = 10.0
PROBE_EVERY = 100
STREAM_SHARE = 0.15
C = grpc.StatusCode
ACCEPTED = {C.OK, C.INVALID_ARGUMENT, C.RESOURCE_EXHAUSTED, C.NOT_FOUND, C.UNIMPLEMENTED, C.FAILED_PRECONDITION,
            C.OUT_OF_RANGE}
SERVER_DEADLINE = "model "  # how the server's DEADLINE_EXCEEDED begins; the client's own says "Deadline Exceeded"


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
        probe = identity_request()
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
            response = self.unary(identity_request().SerializeToString(), timeout=DEADLINE_S)
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
