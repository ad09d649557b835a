"""The `lite` command: inspect, errors without tracebacks, contributed subcommands."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lite.cli import main
from tests.lite.test_model import matmul_model


def run_lite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lite.cli", *args], capture_output=True, text=True)


def test_inspect_table(tmp_path, capsys):
    path = matmul_model(tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "format 2.0" in out
    assert "x                        FLOAT      [N, 4]" in out
    assert "MatMul" in out
    assert "parameters: 8 in 32 B" in out
    assert "labels" in out


def test_inspect_json(tmp_path, capsys):
    path = matmul_model(tmp_path)
    assert main(["inspect", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "x", "dtype": "FLOAT", "shape": ["N", 4]}]
    assert summary["ops"] == {"MatMul": 1}
    assert summary["parameters"]["by_dtype"]["FLOAT"] == {"tensors": 1, "elements": 8, "bytes": 32}
    assert summary["file_size"] == path.stat().st_size


def test_inspect_graph_dot(tmp_path):
    path = matmul_model(tmp_path)
    dot = tmp_path / "g.dot"
    assert main(["inspect", str(path), "--graph", str(dot)]) == 0
    text = dot.read_text()
    assert text.startswith("digraph lite {") and '"MatMul"' in text


@pytest.mark.parametrize("content", [b"", b"garbage", b"\0" * 100])
def test_invalid_file_gives_one_line_error_and_nonzero_exit(tmp_path, content):
    bad = tmp_path / "bad.lite"
    bad.write_bytes(content)
    result = run_lite("inspect", str(bad))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("lite inspect: error: ")


def test_missing_file(tmp_path):
    result = run_lite("inspect", str(tmp_path / "nope.lite"))
    assert result.returncode == 1
    assert "model file not found" in result.stderr


def test_help_lists_commands():
    result = run_lite("--help")
    assert result.returncode == 0
    for command in ("inspect", "convert", "serve", "quickstart"):
        assert command in result.stdout
