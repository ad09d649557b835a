"""``lite serve --workers N``: several server processes on one port (serving/workers.py)."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from .conftest import identity_model, start_server

tritonclient = pytest.importorskip("tritonclient.grpc", reason="the serving tests talk through tritonclient")


@pytest.fixture(scope="module")
def workers_repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    identity_model(root / "echo" / "1" / "model.lite")
    return root


def served_requests(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(value) for value in re.findall(
        r'^lite_inference_requests_total\{[^}]*outcome="success"[^}]*\} (\S+)$', text, re.MULTILINE))


def echo_on_a_new_connection(server) -> None:
    """One request on a client (a connection) of its own; the answer must be the input."""
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    client = tritonclient.InferenceServerClient(server.address)
    try:
        tensor = tritonclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("echo", [tensor]).as_numpy("OUTPUT0"), x)
    finally:
        client.close()


def test_workers_share_the_port_spread_connections_and_stop_together(workers_repository):
    server = start_server(workers_repository, "--workers", "2")
    try:
        wait_listening(server, 2)
        for _ in range(24):  # one connection per client: the kernel spreads them over the workers
            echo_on_a_new_connection(server)
        per_worker = [served_requests(server.metrics_port + i) for i in range(2)]
        assert sum(per_worker) == 24 and min(per_worker) > 0, per_worker  # all on one: 2**-23

        client = tritonclient.InferenceServerClient(server.address)
        with pytest.raises(tritonclient.InferenceServerException) as err:
            client.load_model("echo")
        assert err.value.status() == "StatusCode.PERMISSION_DENIED" and "2 worker processes" in err.value.message()
        client.close()
    finally:
        code = server.stop()
    assert code == 0
    assert sum('"stopped"' in line for line in server.logs) == 2  # each worker shut down gracefully


def wait_listening(server, count: int) -> None:
    """Until ``count`` workers have said "server ready" (bound the port) since the start."""
    deadline = time.monotonic() + 30
    while sum('"server ready"' in line for line in server.logs) < count:
        assert time.monotonic() < deadline, "".join(server.logs[-20:])
        time.sleep(0.05)


def worker_pids(server) -> list[int]:
    """The supervisor's worker processes now (not multiprocessing's resource tracker, also a
    child); empty once the supervisor is gone."""
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    try:
        pids = [int(pid) for pid in children.read_text().split()]
        return [pid for pid in pids if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    except OSError:  # the supervisor or a child just exited
        return []


def spawned_workers(server, count: int) -> list[int]:
    """The workers' pids once ``count`` are running."""
    if not Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").exists():
        pytest.skip("this kernel does not list a process's children in /proc")
    deadline = time.monotonic() + 30
    while len(workers := worker_pids(server)) < count:
        assert time.monotonic() < deadline, f"{len(workers)} of {count} workers running"
        time.sleep(0.05)
    return workers


def test_a_worker_that_dies_is_replaced_and_the_server_keeps_serving(workers_repository):
    server = start_server(workers_repository, "--workers", "2")
    try:
        wait_listening(server, 2)
        first = spawned_workers(server, 2)
        os.kill(first[0], signal.SIGKILL)  # a crash: no graceful shutdown
        deadline = time.monotonic() + 30
        while first[0] in (now := spawned_workers(server, 2)) or len(now) < 2:
            assert time.monotonic() < deadline, "no new worker"
            time.sleep(0.1)
        wait_listening(server, 3)  # the new one listens too
        for _ in range(8):  # new connections, over both workers
            echo_on_a_new_connection(server)
    finally:
        code = server.stop()
    assert code == 0
    assert any("exited with -9; starting a new one" in line for line in server.logs)


def test_workers_that_keep_dying_stop_the_server_with_exit_1(workers_repository):
    server = start_server(workers_repository, "--workers", "2")
    try:
        spawned_workers(server, 2)
        killed: set[int] = set()
        deadline = time.monotonic() + 60
        while server.process.poll() is None:
            assert time.monotonic() < deadline, "still restarting after 60 s"
            for pid in set(worker_pids(server)) - killed:
                killed.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        code = server.process.wait(30)
    finally:
        server.stop()
    assert code == 1
    assert any("6 worker exits within 60 s; stopping the others" in line for line in server.logs)
    assert sum("starting a new one" in line for line in server.logs) == 5


def test_workers_of_a_killed_supervisor_stop_on_their_own(workers_repository):
    server = start_server(workers_repository, "--workers", "2")
    try:
        workers = spawned_workers(server, 2)
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()
                  for pid in workers):
            assert time.monotonic() < deadline, "a worker outlived its supervisor"
            time.sleep(0.1)
    finally:
        server.stop()
    assert any("is gone; stopping" in line for line in server.logs)


def test_metrics_ports_of_all_workers_must_fit():
    from serving.errors import ConfigError
    from serving.settings import Settings

    with pytest.raises(ConfigError, match="metrics_port 65535 \\+ 2 workers"):
        Settings(metrics_port=65535, workers=2)
    assert Settings(metrics_port=0, workers=8).workers == 8  # no metrics: no ports to fit


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_said_without_a_traceback_and_nothing_is_restarted(workers_repository, workers):
    import socket
    import subprocess
    import sys

    from .conftest import REPO_ROOT

    with socket.socket() as taken:  # a listener without SO_REUSEPORT holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "serving", "--repository", str(workers_repository),
                              "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
                              "--workers", workers], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in out.stderr
    assert "Traceback" not in out.stderr and "starting a new one" not in out.stderr
