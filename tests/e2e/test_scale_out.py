"""Scale-out on one machine: two server replicas behind a round-robin gRPC client keep serving
while one of them is restarted (the pattern deploy/kubernetes uses with a headless Service)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from tests.serving.conftest import free_port, identity_model, start_server

grpcclient = pytest.importorskip("tritonclient.grpc", reason="the client side of the demo is tritonclient")

SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [{
        "name": [{"service": "inference.GRPCInferenceService"}],
        # A replica going away answers UNAVAILABLE, refuses the connection, or cancels a call that
        # arrived as it stopped: inference is idempotent, so try another replica.
        "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"]},
    }],
})


def inference_count(address: str) -> int:
    client = grpcclient.InferenceServerClient(address)
    try:
        stats = client.get_inference_statistics("identity", as_json=True)
    finally:
        client.close()
    return sum(int(m.get("inference_count", 0)) for m in stats.get("model_stats", []))


@pytest.mark.slow
def test_round_robin_client_survives_a_replica_restart(tmp_path):
    identity_model(tmp_path / "identity" / "1" / "model.lite")
    ports = [free_port(), free_port()]
    replicas = [start_server(tmp_path, port=port) for port in ports]
    target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
    client = grpcclient.InferenceServerClient(target, channel_args=[
        ("grpc.service_config", json.dumps(json.loads(SERVICE_CONFIG))), ("grpc.enable_retries", 1)])
    failures, served, stop = [], [0], threading.Event()

    def send() -> None:
        x = np.arange(16, dtype=np.float32).reshape(1, 16)
        request = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        request.set_data_from_numpy(x)
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                out = client.infer("identity", [request], client_timeout=10).as_numpy("OUTPUT0")
                assert np.array_equal(out, x)
                served[0] += 1
            except Exception as err:  # every failure is recorded; the test wants none
                status = getattr(err, "status", lambda: None)()
                message = err.message() if hasattr(err, "message") else str(err)
                failures.append(f"{type(err).__name__} {status}: {message}")

    sender = threading.Thread(target=send)
    sender.start()
    try:
        time.sleep(1.0)
        replicas[0].stop()                                  # graceful: in-flight requests finish
        replicas[0] = start_server(tmp_path, port=ports[0])  # back on the same address
        time.sleep(2.0)
    finally:
        stop.set()
        sender.join(timeout=30)
        client.close()
    try:
        counts = [inference_count(f"127.0.0.1:{p}") for p in ports]
    finally:
        for replica in replicas:
            replica.stop()
    assert not failures, failures[:5]
    assert served[0] > 50
    assert all(count > 0 for count in counts), counts  # the restarted replica serves again
