"""The committed protobuf and gRPC code runs on older runtimes than the generator that wrote it.

scripts/generate.py replaces protoc's runtime check (which refuses any protobuf older than the
protoc) by one against PROTOBUF_MINIMUM, and lowers the gRPC stubs' grpcio check to GRPCIO_MINIMUM.
CI installs one protobuf; these tests check what the modules declare and that they import on it,
and then run the messages on the oldest and the newest protobuf of the supported range, and the
gRPC stubs on the oldest grpcio, each installed beside the suite into a temporary folder (skipped
with the reason where pip cannot install them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOBUF_MINIMUM = (5, 26, 1)  # docs/serving.md, pyproject.toml's train extra
GRPCIO_MINIMUM = "1.66.2"  # pyproject.toml's serve extra

MESSAGE_MODULES = [
    "serving._generated.inference_pb2",
    "train._generated.checkpoint_pb2",
    "train._generated.mind_ir_pb2",
]


def _source(module: str) -> str:
    return (ROOT / (module.replace(".", "/") + ".py")).read_text()


@pytest.mark.parametrize("module", MESSAGE_MODULES)
def test_generated_module_declares_the_minimum_runtime(module):
    source = _source(module)
    assert "ValidateProtobufRuntimeVersion" not in source, f"{module} still refuses older runtimes"
    assert f"PROTOBUF_MINIMUM = {PROTOBUF_MINIMUM!r}" in source


def _run_fresh(code: str, *first: Path) -> str:
    # A fresh interpreter: tritonclient (imported by the serving tests) defines `inference.*` in
    # protobuf's one default descriptor pool too, so importing ours after it fails with
    # "duplicate symbol" (tests/serving/conftest.py). ``first``: folders searched before the
    # installed packages (another protobuf or grpcio).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, first), str(ROOT)])}
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                            cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("module", MESSAGE_MODULES)
def test_generated_module_imports_on_the_installed_runtime(module):
    protobuf = pytest.importorskip("google.protobuf")
    installed = tuple(int(part) for part in re.findall(r"\d+", protobuf.__version__)[:3])
    assert installed >= PROTOBUF_MINIMUM, f"protobuf {protobuf.__version__} is below the supported range"
    declared = _run_fresh(f"import {module} as generated; print(generated.PROTOBUF_MINIMUM)")
    assert declared == repr(PROTOBUF_MINIMUM)


ROUND_TRIP = """
from serving._generated import inference_pb2 as pb

request = pb.ModelInferRequest(model_name="digits", id="7")
tensor = request.inputs.add(name="input", datatype="FP32", shape=[1, 2])
tensor.contents.fp32_contents.extend([0.5, -1.5])
request.parameters["priority"].int64_param = 3
request.raw_input_contents.append(b"\\x00\\x01\\x02\\x03")
decoded = pb.ModelInferRequest.FromString(request.SerializeToString())
assert decoded == request, decoded
assert list(decoded.inputs[0].contents.fp32_contents) == [0.5, -1.5], decoded
assert decoded.parameters["priority"].int64_param == 3, decoded
print("round trip")
"""


def test_infer_request_round_trips_on_the_installed_runtime():
    pytest.importorskip("google.protobuf")
    assert _run_fresh(ROUND_TRIP) == "round trip"


PROTOBUF_NEWEST = "7.36.2"  # the newest release of the newest major the extras allow (<8)


def _install(folder: Path, *requirements: str) -> Path:
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder),
                             *requirements], check=False, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"pip cannot install {' '.join(requirements)} here: {result.stderr.strip()[-300:]}")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("version", [".".join(map(str, PROTOBUF_MINIMUM)), PROTOBUF_NEWEST])
def test_messages_round_trip_on_the_oldest_and_newest_protobuf(tmp_path, version):
    folder = _install(tmp_path / "site", f"protobuf=={version}")
    check = "import google.protobuf as p; print(p.__version__)"
    assert _run_fresh(check, folder) == version
    for module in MESSAGE_MODULES:
        assert _run_fresh(f"import {module} as g; print(g.PROTOBUF_MINIMUM)", folder) == repr(PROTOBUF_MINIMUM)
    assert _run_fresh(ROUND_TRIP, folder) == "round trip"


@pytest.mark.slow
def test_grpc_stubs_serve_and_call_on_the_oldest_grpcio(tmp_path):
    """grpcio 1.66.2 with protobuf 5.27.2 (the oldest pair the serve extra allows): a server made
    from the committed servicer base answers ServerLive through the committed stub."""
    folder = _install(tmp_path / "site", f"grpcio=={GRPCIO_MINIMUM}", "protobuf==5.27.2")
    code = """
from concurrent import futures
import grpc
from serving._generated import inference_pb2 as pb, inference_pb2_grpc as stubs

class Live(stubs.GRPCInferenceServiceServicer):
    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

server = grpc.server(futures.ThreadPoolExecutor(1))
stubs.add_GRPCInferenceServiceServicer_to_server(Live(), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
    answer = stubs.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=10)
server.stop(0)
print(grpc.__version__, answer.live)
"""
    assert _run_fresh(code, folder) == f"{GRPCIO_MINIMUM} True"


def test_grpc_stubs_declare_the_minimum_grpcio():
    assert f"GRPC_GENERATED_VERSION = '{GRPCIO_MINIMUM}'" in _source("serving._generated.inference_pb2_grpc")
    pytest.importorskip("grpc")
    code = "from serving._generated import inference_pb2_grpc as stubs; print(stubs.GRPC_GENERATED_VERSION)"
    declared = _run_fresh(code)
    assert declared == GRPCIO_MINIMUM


def test_extras_allow_the_supported_range():
    pyproject = (ROOT / "pyproject.toml").read_text()
    minimum = ".".join(map(str, PROTOBUF_MINIMUM))
    assert f'"protobuf>={minimum},<8"' in pyproject  # the train extra
    assert f'"grpcio>={GRPCIO_MINIMUM}"' in pyproject  # the serve extra
