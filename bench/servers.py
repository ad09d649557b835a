"""Starting servers for the serving benchmarks: a free loopback port, ``lite serve`` as a
subprocess, and waiting until it (and the models named) answer ready."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def subprocess_env() -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH (the caller's entries kept)."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start_lite_serve(repository: Path, port: int, extra: Sequence[str] = (), **popen) -> subprocess.Popen:
    """``python -m serving`` on loopback ``port`` (metrics on a free port, warnings only)."""
    command = [sys.executable, "-m", "serving", "--repository", str(repository), "--host", "127.0.0.1",
               "--port", str(port), "--metrics-port", "0", "--log-level", "warning", *extra]
    return subprocess.Popen(command, env=subprocess_env(), cwd=ROOT, **popen)


def wait_ready(address: str, process: subprocess.Popen, models: Sequence[str] = (), timeout: float = 60.0) -> None:
    """Until the server at ``address`` is ready and so is each of ``models``; raises if ``process``
    exits first or ``timeout`` seconds pass."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode} during start-up")
            try:
                if client.is_server_ready() and all(client.is_model_ready(model) for model in models):
                    return
            except Exception:  # noqa: BLE001 - not listening yet: ask again below
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server at {address} was not ready within {timeout:.0f} s")
    finally:
        client.close()


def stop(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM (the server drains in-flight work), then kill if it is still up after ``timeout``."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
