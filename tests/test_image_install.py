"""The server image's install line, run as the Dockerfile runs it, serves a model with its defaults.

The image once installed the serve extra and ONNX Runtime but not onnx, which lite's ONNX Runtime
engine writes its models with: `lite serve` on the default device died at the first model load.
This test takes the Dockerfile's `pip install` line and its CPU ONNX Runtime pin, installs them
into a fresh virtual environment from a copy of what the image copies, starts `lite serve` there
with no option beyond the repository, and asks for an inference over gRPC with the generated stubs
the image ships (it has no tritonclient).
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lite.format import GraphBuilder, save

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text()

_CLIENT = """
import sys, numpy as np, grpc
from serving._generated import inference_pb2 as pb, inference_pb2_grpc as stubs
channel = grpc.insecure_channel(sys.argv[1])
request = pb.ModelInferRequest(model_name="identity")
tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
reply = stubs.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
print("ANSWER", np.frombuffer(reply.raw_output_contents[0], np.float32).tolist())
"""


# What pip prints when it cannot reach an index at all (not a package that fails to resolve).
_OFFLINE = ("Failed to establish a new connection", "Temporary failure in name resolution",
            "Network is unreachable", "No route to host")


def _install_arguments() -> list[str]:
    """The packages of the Dockerfile's `pip install` line, with the CPU stage's ORT pin."""
    line = re.search(r'pip install --no-cache-dir (.+?) \\\n', DOCKERFILE).group(1)
    pin = re.search(r"FROM python:[^\n]+ AS base-cpu\nENV LITE_ORT_PACKAGE=(\S+)", DOCKERFILE).group(1)
    return [word.replace("$LITE_ORT_PACKAGE", pin) for word in shlex.split(line)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_dockerfile_installs_onnx_beside_onnx_runtime():
    packages = _install_arguments()
    assert any(p.startswith("onnx>=") or p.startswith("onnx=") for p in packages), packages
    assert any(p.startswith("onnxruntime==") for p in packages), packages


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_image_install_line_serves_a_model_with_its_defaults(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("lite", "converter", "serving", "train"):  # what the Dockerfile copies
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", *_install_arguments()], cwd=source,
                             capture_output=True, text=True)
    if install.returncode != 0 and any(sign in install.stderr for sign in _OFFLINE):
        pytest.skip("no package index is reachable from this machine (the install line downloads the image's "
                    "packages): " + next(line.strip() for line in install.stderr.splitlines()
                                         if any(sign in line for sign in _OFFLINE))[:200])
    assert install.returncode == 0, install.stderr[-3000:]

    repository = tmp_path / "models"
    builder = GraphBuilder("identity")
    x = builder.input("x", np.float32, ["N", 4])
    builder.output(builder.node("Relu", [x], outputs=["y"]), np.float32, ["N", 4])
    (repository / "identity" / "1").mkdir(parents=True)
    save(builder.build(), str(repository / "identity" / "1" / "model.lite"))

    port = _free_port()
    server = subprocess.Popen([str(venv / "bin" / "lite"), "serve", "--repository", str(repository), "--host",
                               "127.0.0.1", "--port", str(port), "--metrics-port", "0"],
                              cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        answer = None
        while time.monotonic() < deadline and server.poll() is None:
            client = subprocess.run([str(python), "-c", _CLIENT, f"127.0.0.1:{port}"], cwd=tmp_path,
                                    capture_output=True, text=True)
            if client.returncode == 0:
                answer = client.stdout
                break
            time.sleep(1)
    finally:
        server.terminate()
        try:
            _, log = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, log = server.communicate()
    assert answer is not None, log[-3000:]
    assert "ANSWER [0.0, 1.0, 2.0, 3.0]" in answer
    assert '"device": "cpu"' in log  # the default device found ONNX Runtime, and onnx with it
