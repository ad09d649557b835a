"""The committed protobuf and gRPC code runs on older runtimes than the generator that wrote it.

scripts/generate.py replaces protoc's runtime check (which refuses any protobuf older than the
protoc) by one against PROTOBUF_MINIMUM, and lowers the gRPC stubs' grpcio check to GRPCIO_MINIMUM.
CI installs one protobuf; these tests check what the modules declare and that they import on it.
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


def _run_fresh(code: str) -> str:
    # A fresh interpreter: tritonclient (imported by the serving tests) defines `inference.*` in
    # protobuf's one default descriptor pool too, so importing ours after it fails with
    # "duplicate symbol" (tests/serving/conftest.py).
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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


def test_infer_request_round_trips_on_the_installed_runtime():
    pytest.importorskip("google.protobuf")
    code = """
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
    assert _run_fresh(code) == "round trip"


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
