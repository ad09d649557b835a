"""The bad-request matrix: malformed requests of every kind, each answered
with its status code and a precise message, against one server that must keep serving correct
results and not grow its resident memory by more than 5 % over the whole matrix.

The server runs with a bearer token (every call here carries it unless the case is about auth)
and a 1 MiB message limit, so an oversized message is cheap to send. The cases, as data, and the
requests they send are in bad_request_cases.py; this module runs them against the server.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from .bad_request_cases import (
    AUTH,
    CASES,
    MAX_MESSAGE,
    ROW,
    STREAM_CASES,
    TIMEOUT,
    TOKEN,
    C,
    Case,
    StreamCase,
    infer_request,
    multi_request,
)
from .conftest import identity_model, multi_model, slow_model, start_server, write_config

# ----- the server and how to talk to it -----------------------------------------------------------


@pytest.fixture(scope="module")
def matrix_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix-repository")
    identity_model(root / "identity" / "1" / "model.lite")
    identity_model(root / "batched" / "1" / "model.lite")
    write_config(root / "batched", {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 1000}})
    identity_model(root / "versioned" / "1" / "model.lite", shape=("N", 2))
    identity_model(root / "versioned" / "2" / "model.lite", shape=("N", 3))
    write_config(root / "versioned", {"version_policy": {"all": True}})
    multi_model(root / "multi" / "1" / "model.lite")
    slow_model(root / "slow" / "1" / "model.lite")
    server = start_server(root, "--auth-token", TOKEN, "--max-message-bytes", str(MAX_MESSAGE))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def channel(matrix_server):
    options = [("grpc.max_send_message_length", 8 * MAX_MESSAGE), ("grpc.max_receive_message_length", 8 * MAX_MESSAGE)]
    with grpc.insecure_channel(matrix_server.address, options=options) as channel:
        yield channel


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.GRPCInferenceServiceStub(channel)


def resident_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS line")


_BASELINE: dict[str, int] = {}


def test_matrix_has_at_least_60_distinct_cases():
    ids = [case.id for case in CASES] + [case.id for case in STREAM_CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 60


def test_baseline_memory(matrix_server, stub):
    """Warm the server up with good traffic of the matrix's kinds and sizes (unary and stream calls,
    messages near the size limit), then take its resident memory as the baseline."""
    rows = MAX_MESSAGE // 64 - 64  # a batch just under the message limit
    for _ in range(50):
        response = stub.ModelInfer(infer_request(), metadata=AUTH, timeout=TIMEOUT)
        assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == ROW.ravel().tolist()
    for _ in range(5):
        stub.ModelInfer(infer_request(shape=(rows, 16), raw=b"\x00" * (rows * 64)), metadata=AUTH, timeout=TIMEOUT)
        list(stub.ModelStreamInfer(iter([infer_request()] * 8), metadata=AUTH, timeout=TIMEOUT))
        stub.ModelInfer(multi_request(), metadata=AUTH, timeout=TIMEOUT)
        stub.ModelInfer(infer_request("slow", name="X", shape=(256, 512), raw=b"\x00" * (256 * 512 * 4)),
                        metadata=AUTH, timeout=TIMEOUT)
        for version, width in (("1", 2), ("2", 3)):
            stub.ModelInfer(infer_request("versioned", shape=(1, width), raw=b"\x00" * (4 * width), version=version),
                            metadata=AUTH, timeout=TIMEOUT)
    _BASELINE["rss_kb"] = resident_kb(matrix_server.process.pid)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_request(case: Case, stub, channel):
    error = case.send(stub, channel)
    assert error.code() == case.code, f"{case.id}: {error.code()} {error.details()!r}"
    details = error.details() or ""
    if case.code in (C.DEADLINE_EXCEEDED, C.CANCELLED):  # gRPC's own words or the server's, any case
        details = details.lower()
    for text in case.says:
        assert text in details, f"{case.id}: {error.details()!r} lacks {text!r}"


@pytest.mark.parametrize("case", STREAM_CASES, ids=[case.id for case in STREAM_CASES])
def test_bad_request_on_a_stream_keeps_the_stream_open(case: StreamCase, stub):
    """On the stream, an error is an answer with ``error_message``; the next request still works."""
    bad = pb.ModelInferRequest()
    bad.CopyFrom(case.request)
    bad.id = "bad"
    good = infer_request()
    good.id = "good"
    answers = {answer.infer_response.id: answer
               for answer in stub.ModelStreamInfer(iter([bad, good]), metadata=AUTH, timeout=TIMEOUT)}
    for text in case.says:
        assert text in answers["bad"].error_message, answers["bad"].error_message
    assert answers["good"].error_message == ""
    output = np.frombuffer(answers["good"].infer_response.raw_output_contents[0], np.float32)
    assert output.tolist() == ROW.ravel().tolist()


def test_server_still_serves_and_memory_is_flat(matrix_server, stub):
    """After the matrix: correct answers on every model, and resident memory within 5 % of the baseline."""
    assert "rss_kb" in _BASELINE, "run the whole module: the baseline is taken before the matrix"
    response = stub.ModelInfer(infer_request(), metadata=AUTH, timeout=TIMEOUT)
    assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == ROW.ravel().tolist()
    response = stub.ModelInfer(multi_request(), metadata=AUTH, timeout=TIMEOUT)
    assert [o.name for o in response.outputs] == [name + "_OUT" for name in ("F16", "I32", "B", "S", "U8", "F64")]
    response = stub.ModelInfer(infer_request("versioned", shape=(1, 2), raw=b"\x00" * 8, version="1"),
                               metadata=AUTH, timeout=TIMEOUT)
    assert response.model_version == "1"
    for _ in range(50):
        stub.ModelInfer(infer_request(), metadata=AUTH, timeout=TIMEOUT)
    grown = resident_kb(matrix_server.process.pid) / _BASELINE["rss_kb"] - 1
    print(f"resident memory: {_BASELINE['rss_kb']} kB before the matrix, grew by {grown:.2%}")
    assert grown <= 0.05, f"resident memory grew by {grown:.1%} over the matrix"
    assert matrix_server.process.poll() is None
