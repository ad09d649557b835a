"""Every example in docs/serving.md runs: each ``python`` block in a fresh interpreter (they start
their own servers), each ``json`` block is a valid model configuration."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from serving.config import parse_config

from .conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "serving.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [code for lang, code in _BLOCK.findall(DOC.read_text()) if lang == language]


def test_the_doc_has_examples():
    assert len(blocks("python")) >= 4 and blocks("json")


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_example_runs(index, tmp_path):
    code = blocks("python")[index]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, f"example {index} failed:\n{code}\n--- stderr ---\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("index", range(len(blocks("json"))))
def test_json_example_is_a_valid_config(index):
    parse_config(json.loads(blocks("json")[index]), f"docs/serving.md json block {index}")
