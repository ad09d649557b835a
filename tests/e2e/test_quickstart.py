"""The README's first command: `lite quickstart` runs the whole path end to end."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("sklearn", reason="the quickstart trains on scikit-learn's digits")
pytest.importorskip("tritonclient.grpc", reason="the quickstart queries the server with tritonclient")


@pytest.mark.slow
def test_quickstart_end_to_end(tmp_path):
    result = subprocess.run([sys.executable, "-m", "lite.cli", "quickstart", "--workdir", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    accuracies = {label.strip(): float(value) for label, value in
                  re.findall(r"^(.+?)\s+(\d+\.\d+)%", out, flags=re.MULTILINE)}
    for path in ("trained network (train core)", "fp32 .lite, numpy engine", "int8 .lite, numpy engine",
                 "served (tritonclient, gRPC)"):
        assert accuracies[path] >= 97.0, out
    # fp32 paths compute the same network: the same accuracy; int8 loses at most 0.5 points.
    fp32 = {v for k, v in accuracies.items() if not k.startswith("int8")}
    assert len(fp32) == 1, out
    reference = fp32.pop()
    assert all(reference - v <= 0.5 for k, v in accuracies.items() if k.startswith("int8")), out
    assert "BatchNormalization nodes: 2 -> 0" in out
    predicted, label = re.search(r"predicted (\d+), label (\d+)", out).groups()
    assert predicted == label
    assert "server stopped with exit code 0" in out
    for artifact in ("lenet5_bn.ckpt", "lenet5_bn.onnx", "lenet5_bn.lite", "lenet5_bn_int8.lite",
                     "models/digits/1/model.lite"):
        assert (tmp_path / artifact).exists(), artifact
