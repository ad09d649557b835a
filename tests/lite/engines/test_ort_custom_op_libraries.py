"""Custom op libraries registered with the ONNX Runtime engine (``custom_op_libraries=``):
onnxruntime-extensions' ops (its ai.onnx.contrib domain) run on ONNX Runtime, not on numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import lite
from lite.engines.ort.sessions import SessionConfig

pytest.importorskip("onnxruntime")


def lower_case_model():
    """One onnxruntime-extensions op: StringLower (ai.onnx.contrib)."""
    graph = helper.make_graph(
        [helper.make_node("StringLower", ["text"], ["lower"], name="lower", domain="ai.onnx.contrib")], "lower",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("lower", TensorProto.STRING, ["N"])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_a_library_that_is_not_a_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a file"):
        SessionConfig(custom_op_libraries=[str(tmp_path / "missing.so")])


def test_one_library_path_alone_is_a_list_of_one(tmp_path):
    library = tmp_path / "ops.so"
    library.write_bytes(b"")
    assert SessionConfig(custom_op_libraries=str(library)).custom_op_libraries == (str(library.resolve()),)


def test_the_ops_of_a_registered_library_run_on_onnx_runtime(onnxruntime_extensions, tmp_path):
    extensions = onnxruntime_extensions
    import converter

    path = tmp_path / "lower.lite"
    converter.convert(lower_case_model(), path, allow_custom=True, verify=False)
    text = np.array(["Hello World", "ABC"], dtype=object)
    model = lite.Model.load(path, device="cpu", cache_dir=None, custom_op_libraries=[extensions.get_library_path()])
    assert model.engine.numpy_nodes == 0
    assert list(model(text)) == ["hello world", "abc"]
    with pytest.raises(lite.UnsupportedOpError, match="StringLower"):
        lite.Model.load(path, device="cpu", cache_dir=None)


def test_lite_run_and_bench_register_a_library(onnxruntime_extensions, tmp_path):
    """lite run and lite bench take --custom-op-library as lite convert does; the numpy device,
    which runs custom ops from lite.CustomOps kernels, refuses it by name."""
    import json
    import subprocess
    import sys

    extensions = onnxruntime_extensions
    import converter

    path = tmp_path / "lower.lite"
    converter.convert(lower_case_model(), path, allow_custom=True, verify=False)
    np.save(tmp_path / "text.npy", np.array(["Hello World"]))  # fixed-width text: no pickle
    library = extensions.get_library_path()

    def lite_cli(*args):
        return subprocess.run([sys.executable, "-m", "lite.cli", *args], capture_output=True, text=True, check=False)

    ran = lite_cli("run", str(path), "--device", "cpu", "--custom-op-library", library,
                   "--input", f"text={tmp_path / 'text.npy'}")
    assert ran.returncode == 0 and "lower: object[1]" in ran.stdout, ran.stderr
    benched = lite_cli("bench", str(path), "--device", "cpu", "--custom-op-library", library, "--loops", "2",
                       "--input", f"text={tmp_path / 'text.npy'}", "--json", str(tmp_path / "bench.json"))
    assert benched.returncode == 0, benched.stderr
    assert json.loads((tmp_path / "bench.json").read_text())["device"] == "cpu"
    refused = lite_cli("run", str(path), "--device", "numpy", "--custom-op-library", library,
                       "--input", f"text={tmp_path / 'text.npy'}")
    assert refused.returncode == 1 and "use --device cpu, cuda or auto" in refused.stderr
