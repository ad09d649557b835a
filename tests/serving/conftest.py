"""Fixtures for the serving tests: tiny .lite models, a repository, and a real server process.

The server runs in a subprocess (``python -m serving``) and the tests talk to it with the real
``tritonclient.grpc``. It cannot run in the test process: tritonclient and the server's
generated code both define ``inference.*`` in protobuf's one default descriptor pool, and
the second import fails with "duplicate symbol". The transport-free core has no such problem
and is tested in-process (test_batching.py, test_dataplane.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from lite.format import GraphBuilder, save

REPO_ROOT = Path(__file__).resolve().parents[2]
LABELS = ["cat", "dog", "bird", "fish"]
PREPROCESSING = {"resize": 8, "crop": 8, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "layout": "NCHW"}


# ----- models -----------------------------------------------------------------------------------


def _save(model, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))


def identity_model(path: Path, dtype=np.float32, shape=("N", 16), name_in="INPUT0", name_out="OUTPUT0",
                   metadata: dict | None = None) -> Path:
    b = GraphBuilder("identity")
    x = b.input(name_in, dtype, list(shape))
    y = b.node("Identity", [x], outputs=[name_out])
    b.output(y, dtype, list(shape))
    _save(b.build(metadata=metadata), path)
    return path


def multi_model(path: Path) -> Path:
    """Several inputs of different datatypes, each passed through to an output."""
    b = GraphBuilder("multi")
    specs = [("F16", np.float16, ["N", 3]), ("I32", np.int32, ["N", 3]), ("B", np.bool_, ["N", 3]),
             ("S", np.object_, ["N", 2]), ("U8", np.uint8, ["N", 3]), ("F64", np.float64, ["N", 3])]
    for name, dtype, shape in specs:
        x = b.input(name, dtype, shape)
        y = b.node("Identity", [x], outputs=[name + "_OUT"])
        b.output(y, dtype, shape)
    _save(b.build(), path)
    return path


def classifier_model(path: Path) -> Path:
    b = GraphBuilder("classifier")
    x = b.input("LOGITS", np.float32, ["N", 4])
    y = b.node("Softmax", [x], outputs=["PROBS"], axis=-1)
    b.output(y, np.float32, ["N", 4])
    _save(b.build(metadata={"labels": json.dumps(LABELS)}), path)
    return path


def image_model(path: Path) -> Path:
    """NCHW float image [N,3,8,8] -> per-channel mean [N,3,1,1], with a preprocessing spec."""
    b = GraphBuilder("image")
    x = b.input("IMAGE", np.float32, ["N", 3, 8, 8])
    y = b.node("GlobalAveragePool", [x], outputs=["MEAN"])
    b.output(y, np.float32, ["N", 3, 1, 1])
    _save(b.build(metadata={"preprocessing": json.dumps(PREPROCESSING)}), path)
    return path


def slow_model(path: Path, width: int = 512, layers: int = 6) -> Path:
    """A chain of MatMuls: time grows with the batch, for drain and shutdown tests."""
    b = GraphBuilder("slow")
    x = b.input("X", np.float32, ["N", width])
    weight = b.constant("W", (np.eye(width, dtype=np.float32)))
    for i in range(layers):
        x = b.node("MatMul", [x, weight], outputs=[f"Y{i}" if i < layers - 1 else "Y"])
    b.output(x, np.float32, ["N", width])
    _save(b.build(), path)
    return path


def write_config(model_dir: Path, config: dict) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="session")
def repository(tmp_path_factory) -> Path:
    """The repository most tests share (read-only: tests that change it make their own)."""
    root = tmp_path_factory.mktemp("repository")
    identity_model(root / "identity" / "1" / "model.lite")
    identity_model(root / "batched" / "1" / "model.lite")
    write_config(root / "batched", {
        "max_batch_size": 8,
        "dynamic_batching": {"max_queue_delay_us": 2000, "preferred_batch_sizes": [4, 8]},
        "instance_count": 1,
    })
    identity_model(root / "versioned" / "1" / "model.lite", shape=("N", 2))
    identity_model(root / "versioned" / "2" / "model.lite", shape=("N", 3))
    write_config(root / "versioned", {"version_policy": {"all": True}})
    identity_model(root / "renamed" / "1" / "model.lite", name_in="x", name_out="y")
    write_config(root / "renamed", {"inputs": {"x": "INPUT"}, "outputs": {"y": "OUTPUT"}})
    multi_model(root / "multi" / "1" / "model.lite")
    classifier_model(root / "classifier" / "1" / "model.lite")
    write_config(root / "classifier", {"max_batch_size": 4})
    image_model(root / "image" / "1" / "model.lite")
    write_config(root / "image", {"max_batch_size": 4, "preprocessing": "image"})
    slow_model(root / "slow" / "1" / "model.lite")
    write_config(root / "slow", {"max_queue_size": 2})
    return root


# ----- the server process ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    process: subprocess.Popen
    port: int
    metrics_port: int
    logs: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)


def start_server(repository: Path, *extra: str, env: dict | None = None, timeout: float = 30.0,
                 port: int | None = None) -> ServerProcess:
    """A server on free ports. A port free_port() found can be taken by another process before
    the server binds it (the suite's other servers, any job on the machine): that start is retried
    on new ports, a few times."""
    for attempt in range(3):
        try:
            return _start_once(repository, *extra, env=env, timeout=timeout, port=port)
        except RuntimeError as err:
            if "Address already in use" not in str(err) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_once(repository: Path, *extra: str, env: dict | None, timeout: float, port: int | None) -> ServerProcess:
    port, metrics_port = port or free_port(), free_port()
    command = [sys.executable, "-m", "serving", "--repository", str(repository), "--host", "127.0.0.1",
               "--port", str(port), "--metrics-port", str(metrics_port), "--grace-period-s", "5", *extra]
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               env=environment, cwd=REPO_ROOT)
    server = ServerProcess(process, port, metrics_port)
    ready = threading.Event()

    def read_logs() -> None:
        for line in process.stderr:
            server.logs.append(line)
            if '"server ready"' in line:
                ready.set()

    threading.Thread(target=read_logs, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not ready.wait(0.05):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError("server did not start:\n" + "".join(server.logs[-30:]))
    return server


def refusal_to_start(repository: Path, *flags: str, env: dict | None = None) -> str:
    """What ``python -m serving`` says on stderr when it refuses to start (it must exit, with status 2)."""
    command = [sys.executable, "-m", "serving", "--repository", str(repository), "--host", "127.0.0.1",
               "--port", str(free_port()), "--metrics-port", "0", *flags]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=20, cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server started with {flags} instead of refusing to")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def server(repository):
    process = start_server(repository)
    yield process
    process.stop()


@pytest.fixture()
def client(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.address)
    yield client
    client.close()


def request_counts(metrics_port: int, model: str) -> tuple[float, float]:
    """Requests of ``model`` in flight (queued or running) and succeeded, from the server's
    Prometheus endpoint."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    pending = done = 0.0
    for line in text.splitlines():
        if f'model="{model}"' not in line:
            continue
        if line.startswith("lite_inference_pending_requests{"):
            pending = float(line.rsplit(" ", 1)[1])
        elif line.startswith("lite_inference_requests_total{") and 'outcome="success"' in line:
            done = float(line.rsplit(" ", 1)[1])
    return pending, done
