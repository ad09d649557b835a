"""The CI-sized fuzz runs, zero findings each: 5,000 mutated inputs per loader, 1,000 mutated
.lite files through each further surface (path loading, predict on every CPU engine, the
``lite`` commands), and 500 mutated requests to a real ``lite serve``.

The full runs are ``make fuzz`` (see docs/reliability.md); these use the same harnesses with a
fixed seed, so a failure here is reproduced with
``python -m tests.fuzz.run --format FORMAT --seed 1 --replay INDEX`` or
``python -m tests.fuzz.grpc_requests --seed 1 --replay INDEX``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fuzz.run import LOADER_FORMATS, REPO_ROOT, SURFACE_FORMATS, fuzz

CI_SEED = 1
CI_COUNT = 5000
CI_SURFACE_COUNT = 1000
CI_REQUESTS = 500


def _check(reports, count: int) -> None:
    summary = "\n".join(report.summary() for report in reports.values())
    print(summary)
    for report in reports.values():
        assert report.inputs == count, summary
        details = [json.loads(f.detail)["error"] if f.detail.startswith("{") else f.detail for f in report.findings]
        assert not report.findings, f"{report.format}: {[(f.kind, f.index) for f in report.findings]}\n{details[:5]}"
        loaded = sum(n for outcome, n in report.outcomes.items() if outcome == "ok" or "=ok" in outcome
                     or outcome.startswith("inspect exit 0"))
        assert loaded > 0, f"{report.format}: no mutated input loaded at all; the seeds are broken"


@pytest.mark.slow
def test_every_loader_survives_5000_mutated_inputs():
    _check(fuzz(list(LOADER_FORMATS), CI_COUNT, seed=CI_SEED, jobs=2, chunk=CI_COUNT), CI_COUNT)


@pytest.mark.slow
def test_every_surface_of_a_lite_file_survives_1000_mutated_files():
    """Path loading (memory-mapped and not), predict on numpy and ONNX Runtime, ``lite inspect``
    and ``lite run``: a typed error or success for each file."""
    _check(fuzz(list(SURFACE_FORMATS), CI_SURFACE_COUNT, seed=CI_SEED, jobs=2, chunk=CI_SURFACE_COUNT),
           CI_SURFACE_COUNT)


@pytest.mark.slow
def test_the_server_answers_500_mutated_requests_with_a_status(tmp_path):
    """Run as a subprocess: the client uses the server's generated protocol code, which cannot
    share a process with tritonclient's (imported by other serving tests)."""
    report_path = tmp_path / "grpc.json"
    command = [sys.executable, "-m", "tests.fuzz.grpc_requests", "--count", str(CI_REQUESTS),
               "--seed", str(CI_SEED), "--report", str(report_path)]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    print(result.stdout)
    assert report_path.exists(), result.stdout + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["requests"] == CI_REQUESTS, result.stdout
    assert not report["findings"], result.stdout
    assert report["outcomes"].get("OK", 0) > 0 and report["outcomes"].get("INVALID_ARGUMENT", 0) > 0, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
