"""``lite bench --grpc``: the runtime's bench command with serving's plug-in
(entry point group ``lite.bench_backends``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lite import cli
from lite.commands import bench

from .conftest import REPO_ROOT


def run_lite(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    # A separate process: the plug-in imports tritonclient (see conftest on why not here).
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "lite.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO_ROOT)


def test_lite_bench_grpc_reports_throughput_latency_and_the_server_breakdown(server, tmp_path):
    report_file = tmp_path / "report.json"
    done = run_lite("bench", "--grpc", server.address, "--model", "batched", "--concurrency", "4",
                    "--duration", "0.5", "--warmup", "2", "--json", str(report_file))
    assert done.returncode == 0, done.stderr
    assert "throughput" in done.stdout and "p99" in done.stdout and "queue" in done.stdout
    report = json.loads(report_file.read_text())
    assert report["model"] == "batched" and report["concurrency"] == 4
    assert report["requests"] > 0 and report["throughput_rps"] > 0
    assert report["latency_us"]["p50"] <= report["latency_us"]["p90"] <= report["latency_us"]["p99"]
    server_side = report["server"]
    for key in ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us", "average_batch"):
        assert server_side[key] is not None, key
    assert server_side["average_batch"] >= 1


def test_lite_bench_grpc_says_what_went_wrong(server):
    done = run_lite("bench", "--grpc", server.address, "--model", "no-such-model", "--duration", "0.2")
    assert done.returncode == 1
    assert "NOT_FOUND" in done.stderr and "Traceback" not in done.stderr
    done = run_lite("bench", "--grpc", server.address, "--duration", "0.2")
    assert done.returncode == 1 and "--model" in done.stderr


def test_lite_bench_grpc_sends_the_shapes_and_arrays_it_is_given(server, tmp_path):
    report_file = tmp_path / "report.json"
    common = ("bench", "--grpc", server.address, "--duration", "0.2", "--warmup", "1", "--json", str(report_file))
    done = run_lite(*common, "--model", "identity", "--shape", "INPUT0:3,16")
    assert done.returncode == 0, done.stderr
    assert json.loads(report_file.read_text())["inputs"] == {"INPUT0": [3, 16]}
    done = run_lite(*common, "--model", "batched", "--shape", "5,16")  # the only input: no name needed
    assert done.returncode == 0, done.stderr
    report = json.loads(report_file.read_text())
    assert report["inputs"] == {"INPUT0": [5, 16]} and report["batch"] == 5
    np.save(tmp_path / "x.npy", np.arange(7 * 16, dtype=np.float64).reshape(7, 16))  # converted to FP32
    done = run_lite(*common, "--model", "identity", "--input", f"INPUT0={tmp_path / 'x.npy'}")
    assert done.returncode == 0, done.stderr
    assert json.loads(report_file.read_text())["inputs"] == {"INPUT0": [7, 16]}


@pytest.mark.parametrize("flag", ["--shape", "--input"])
def test_lite_bench_grpc_names_the_inputs_when_given_an_unknown_one(server, tmp_path, flag):
    np.save(tmp_path / "x.npy", np.zeros((1, 16), np.float32))
    value = "NOPE:1,16" if flag == "--shape" else f"NOPE={tmp_path / 'x.npy'}"
    done = run_lite("bench", "--grpc", server.address, "--model", "identity", flag, value, "--duration", "0.2")
    assert done.returncode == 1
    assert f"{flag} names input 'NOPE'" in done.stderr and "['INPUT0']" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_without_the_plugin_lite_bench_names_the_extra(monkeypatch, capsys):
    monkeypatch.setattr(bench, "entry_points", lambda group: [])
    assert cli.main(["bench", "--grpc", "127.0.0.1:1", "--model", "m"]) == 2
    assert "pip install 'lite-toolchain[serve]'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["bench"], "give a .lite file"),
    (["bench", "model.lite", "--grpc", "127.0.0.1:1"], "not both"),
])
def test_lite_bench_needs_a_file_or_a_server(argv, message, capsys):
    assert cli.main(argv) == 1
    assert message in capsys.readouterr().err
