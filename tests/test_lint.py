"""The lint gate: `ruff check` with the rules pyproject.toml selects passes on the whole tree."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff (dev extra) is not installed")
def test_ruff_passes():
    result = subprocess.run(["ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
