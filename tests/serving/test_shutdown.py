"""Graceful shutdown (SIGTERM): requests in flight finish, calls that arrive meanwhile are answered
UNAVAILABLE at once by the server itself, and open streams end instead of holding the shutdown
for the whole grace period. Each test owns its server."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.lite.engines.models import endless_loop

from .conftest import identity_model, request_counts, slow_model, start_server

GRACE_S = 20  # long, so that a call or stream held for the whole grace period shows


@pytest.fixture()
def repository(tmp_path):
    path = slow_model(tmp_path / "slow" / "1" / "model.lite")
    layers = layers_for(path, SLOW_CALL_S)
    if layers > SLOW_LAYERS:
        slow_model(path, layers=layers)
    identity_model(tmp_path / "identity" / "1" / "model.lite")
    return tmp_path


SLOW_LAYERS = 6  # slow_model's default
SLOW_CALL_S = 0.3  # what a slow call should take: the tests act while calls are still running


def layers_for(path, seconds: float) -> int:
    """How many MatMul layers make one slow request take about ``seconds`` on this machine (a
    16-core CPU ran the default 6 in a few ms, and all calls finished before the tests could act)."""
    import math

    import lite

    model = lite.Model.load(path)
    feeds = {"X": np.ones((1024, 512), np.float32)}
    model.predict(feeds)
    started = time.perf_counter()
    model.predict(feeds)
    took = max(time.perf_counter() - started, 1e-4)
    return min(SLOW_LAYERS * math.ceil(seconds / took), 2000)


def slow_request(rows: int = 1024) -> service_pb2.ModelInferRequest:
    message = service_pb2.ModelInferRequest(model_name="slow", id="slow")
    message.inputs.add(name="X", datatype="FP32", shape=[rows, 512])
    message.raw_input_contents.append(np.ones((rows, 512), np.float32).tobytes())
    return message


def small_request() -> service_pb2.ModelInferRequest:
    message = service_pb2.ModelInferRequest(model_name="identity", id="small")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    message.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
    return message


def pending(metrics_port: int, model: str) -> float:
    return request_counts(metrics_port, model)[0]


def all_arrived_some_queued(metrics_port: int, count: int) -> bool:
    waiting, done = request_counts(metrics_port, "slow")
    return waiting >= 2 and waiting + done >= count


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_calls_during_shutdown_are_unavailable_at_once_and_calls_in_flight_finish(repository):
    server = start_server(repository, "--grace-period-s", str(GRACE_S))
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            stub.ModelInfer(small_request(), timeout=10)
            in_flight = [stub.ModelInfer.future(slow_request(), timeout=60) for _ in range(6)]
            wait_for(lambda: all_arrived_some_queued(server.metrics_port, len(in_flight)))
            server.process.terminate()  # SIGTERM
            refusals = []
            while not all(call.done() for call in in_flight):  # new calls while the slow ones still run
                # The slow calls run one at a time: while two are unanswered, the server is surely
                # still draining (after the last, it may already have stopped).
                draining = sum(not call.done() for call in in_flight) >= 2
                started = time.monotonic()
                with pytest.raises(grpc.RpcError) as info:
                    stub.ModelInfer(small_request(), timeout=10)
                refusals.append((info.value.code(), info.value.details(), time.monotonic() - started, draining))
                time.sleep(0.01)
            for call in in_flight:
                assert list(call.result().outputs[0].shape) == [1024, 512]
        assert server.process.wait(GRACE_S) == 0
    finally:
        server.stop()
    # While it drains, UNAVAILABLE at once. Once the last slow call is answered the server stops,
    # and gRPC cancels a call that arrives in that instant: CANCELLED is the transport's answer then.
    others = [refusal for refusal in refusals if refusal[0] != grpc.StatusCode.UNAVAILABLE
              and (refusal[3] or refusal[0] != grpc.StatusCode.CANCELLED)]
    assert not others, f"{len(others)} of {len(refusals)} refusals were not UNAVAILABLE: {others}"
    assert all(seconds < 2 for _, _, seconds, _ in refusals), refusals
    # While it drains the server itself answers, and says why: it has not stopped listening.
    during_drain = [details for _, details, _, draining in refusals if draining]
    assert during_drain, "the calls in flight finished before any new call was made"
    assert all("shutting down" in details for details in during_drain), during_drain


def test_open_streams_answer_what_they_hold_then_end_unavailable_without_holding_the_shutdown(repository):
    server = start_server(repository, "--grace-period-s", str(GRACE_S))
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            busy_requests: queue.Queue = queue.Queue()
            idle_requests: queue.Queue = queue.Queue()
            busy = stub.ModelStreamInfer(iter(busy_requests.get, None), timeout=60)
            idle = stub.ModelStreamInfer(iter(idle_requests.get, None), timeout=60)
            idle_requests.put(small_request())
            assert next(idle).infer_response.id == "small"  # open, answered, now idle
            busy_requests.put(slow_request())
            wait_for(lambda: pending(server.metrics_port, "slow") >= 1)
            started = time.monotonic()
            server.process.terminate()  # SIGTERM
            answers, ends = {}, {}

            def drain(name: str, stream) -> None:
                try:
                    for answer in stream:
                        answers[name] = answer
                except grpc.RpcError as err:
                    ends[name] = (err.code(), err.details())

            readers = [threading.Thread(target=drain, args=item) for item in (("busy", busy), ("idle", idle))]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join(GRACE_S + 5)
            code = server.process.wait(GRACE_S)
            elapsed = time.monotonic() - started
            busy_requests.put(None)
            idle_requests.put(None)
    finally:
        server.stop()
    assert code == 0
    assert not answers["busy"].error_message and answers["busy"].infer_response.id == "slow"
    for name in ("busy", "idle"):
        assert ends[name][0] == grpc.StatusCode.UNAVAILABLE, ends
        assert "shutting down" in ends[name][1]
    assert elapsed < GRACE_S / 2, f"shutdown took {elapsed:.1f} s of the {GRACE_S} s grace period"


def test_an_execution_that_never_finishes_does_not_outlive_the_grace_period(tmp_path):
    """A model whose Loop never ends holds its worker thread; after SIGTERM the server exits
    anyway, once the grace period (and the small margin to send answers) is over."""
    grace_s = 2
    path = tmp_path / "endless" / "1" / "model.lite"
    path.parent.mkdir(parents=True)
    path.write_bytes(endless_loop())
    server = start_server(tmp_path, "--grace-period-s", str(grace_s))
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            message = small_request()
            message.model_name = "endless"
            call = stub.ModelInfer.future(message, timeout=120)
            wait_for(lambda: pending(server.metrics_port, "endless") >= 1)
            time.sleep(0.5)  # the execution has started and is looping
            started = time.monotonic()
            server.process.terminate()  # SIGTERM
            try:
                code = server.process.wait(grace_s + 10)
            except subprocess.TimeoutExpired:
                code = None
            elapsed = time.monotonic() - started
            with pytest.raises(grpc.RpcError) as info:
                call.result(timeout=10)
    finally:
        server.stop()
    assert code is not None, f"the server still ran {elapsed:.0f} s after SIGTERM (grace period {grace_s} s)"
    assert code == 1  # serving.grpc.server.HARD_STOP_EXIT_CODE: not a clean shutdown
    assert grace_s <= elapsed < grace_s + 6, elapsed
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert any("still running after the grace period" in line for line in server.logs), server.logs[-5:]


@pytest.mark.parametrize("service", ["", "inference.GRPCInferenceService"])
def test_health_turns_not_serving_when_the_server_stops(tmp_path, service):
    """The server's health, under "" and under the inference service's name, is SERVING once
    ready and NOT_SERVING from the moment it is asked to stop."""
    identity_model(tmp_path / "identity" / "1" / "model.lite")
    server = start_server(tmp_path)
    status = health_pb2.HealthCheckResponse
    try:
        with grpc.insecure_channel(server.address) as channel:
            updates = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=service),
                                                                timeout=30)
            assert next(updates).status == status.SERVING
            server.process.send_signal(signal.SIGTERM)
            assert next(updates).status == status.NOT_SERVING
    finally:
        server.stop()
