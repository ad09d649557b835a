"""No import cycle among the runtime's modules (scripts/import_cycles.py, lazy imports included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_lite_has_no_import_cycle():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "import_cycles.py"), str(ROOT / "lite")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 import cycle(s)" in result.stdout
