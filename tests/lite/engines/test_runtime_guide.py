"""Every ``python`` block of docs/runtime.md runs as it is (optional engines skipped when absent)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from lite import autotune

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "runtime.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
# A block that names an optional engine needs its package.
NEEDS = {'engine="openvino"': "openvino", 'device="cpu"': "onnxruntime", "lite.engines.ort": "onnxruntime"}


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_guide_example_runs(index, monkeypatch, capsys):
    block = BLOCKS[index]
    for marker, package in NEEDS.items():
        if marker in block and importlib.util.find_spec(package) is None:
            pytest.skip(f"the example uses {marker}, which needs {package}")
    # engine="auto" examples measure briefly: the choice is not what this test checks.
    monkeypatch.setattr(autotune, "DEFAULT_TIMING", autotune.Timing(rounds=1, extra_rounds=0, warmup_s=0.0, measure_s=0.01))
    exec(compile(block, f"{GUIDE.name} block {index}", "exec"), {"__name__": f"guide_{index}"})
    assert capsys.readouterr().out
