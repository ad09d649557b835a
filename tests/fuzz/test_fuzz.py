"""The CI-sized fuzz run: 5,000 mutated inputs per format, zero findings.

The full run is ``make fuzz`` (100,000 per format, see docs/reliability.md); this one uses the
same harness (worker processes under an address-space cap, a 2 s per-input deadline) with a
fixed seed, so a failure here is reproduced with
``python -m tests.fuzz.run --format FORMAT --seed 1 --replay INDEX``.
"""

from __future__ import annotations

import json

import pytest

from tests.fuzz.run import FORMATS, fuzz

CI_SEED = 1
CI_COUNT = 5000


@pytest.mark.slow
def test_every_loader_survives_5000_mutated_inputs():
    reports = fuzz(list(FORMATS), CI_COUNT, seed=CI_SEED, jobs=2, chunk=CI_COUNT)
    summary = "\n".join(report.summary() for report in reports.values())
    print(summary)
    for report in reports.values():
        assert report.inputs == CI_COUNT, summary
        details = [json.loads(f.detail)["error"] if f.detail.startswith("{") else f.detail for f in report.findings]
        assert not report.findings, f"{report.format}: {[(f.kind, f.index) for f in report.findings]}\n{details[:5]}"
        assert report.outcomes["ok"] > 0, f"{report.format}: no mutated input loaded at all; the seeds are broken"
