"""Every ```python example in README.md and docs/*.md runs, as written, in a fresh interpreter.

Each runs in a scratch directory that holds what the examples refer to by name: ``model.lite`` (a
LeNet-shaped network, input ``input`` of shape [N, 1, 32, 32]). docs/serving.md has its own test
(tests/serving/test_docs.py, which starts the server its examples talk to), and so does docs/runtime.md
(tests/lite/engines/test_runtime_guide.py, which skips the engines that are not installed).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
OWN_TESTS = {"serving.md", "runtime.md"}  # tests/serving/test_docs.py, tests/lite/engines/test_runtime_guide.py
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_TESTS)]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples():
    for page in PAGES:
        for index, match in enumerate(BLOCK.finditer(page.read_text())):
            line = page.read_text().count("\n", 0, match.start()) + 1
            yield pytest.param(match.group(1), id=f"{page.name}:{line}")


def lenet_shaped_model(path: Path) -> None:
    from lite.format import GraphBuilder, save

    rng = np.random.default_rng(0)
    b = GraphBuilder("lenet_shaped", opset=17)
    x = b.input("input", np.float32, ["N", 1, 32, 32])
    y = b.node("Conv", [x, b.constant("w", rng.standard_normal((4, 1, 5, 5)).astype(np.float32))], strides=[4, 4])
    y = b.node("Relu", [y])
    y = b.node("Flatten", [y])
    y = b.node("Gemm", [y, b.constant("fc", rng.standard_normal((10, 196)).astype(np.float32))], transB=1,
               outputs=["logits"])
    b.output(y, np.float32, ["N", 10])
    save(b.build(), path)


@pytest.mark.parametrize("code", examples())
def test_example_runs(code, tmp_path):
    if "import converter" in code or "from converter" in code:
        pytest.importorskip("onnx", reason="the example converts a model (convert extra)")
    if "from train" in code:
        pytest.importorskip("sklearn", reason="the example trains on scikit-learn's digits")
    if "tritonclient" in code:
        pytest.importorskip("tritonclient.grpc", reason="the example uses tritonclient")
    lenet_shaped_model(tmp_path / "model.lite")
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env=_environment())
    assert result.returncode == 0, f"example failed:\n{code}\n--- output ---\n{result.stdout}{result.stderr}"


def _environment():
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}
