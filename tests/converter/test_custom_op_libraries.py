"""``convert(custom_op_libraries=...)`` / ``lite convert --custom-op-library``: ONNX Runtime runs
the original and the converted model with the library's ops, so a model using them is verified."""

from __future__ import annotations

import numpy as np
import pytest

import converter
from converter.errors import InvalidOptionError
from tests.lite.engines.test_ort_custom_op_libraries import lower_case_model

pytest.importorskip("onnxruntime")


def test_a_library_that_is_not_a_file_is_an_option_error(tmp_path):
    with pytest.raises(InvalidOptionError, match="custom op library"):
        converter.convert(lower_case_model(), tmp_path / "m.lite", allow_custom=True,
                          custom_op_libraries=[str(tmp_path / "missing.so")])


def test_verification_runs_the_original_and_the_converted_model_with_the_library(onnxruntime_extensions, tmp_path):
    extensions = onnxruntime_extensions
    samples = [{"text": np.array(["Hello World", "ABC"], dtype=object)}]
    report = converter.convert(lower_case_model(), tmp_path / "m.lite", allow_custom=True, verify_data=samples,
                               custom_op_libraries=[extensions.get_library_path()])
    assert report.verification.passed, report.verification.to_dict()
    assert "ONNX Runtime engine" in report.verification.engine


def test_the_cli_passes_the_library_to_verification(onnxruntime_extensions, tmp_path):
    extensions = onnxruntime_extensions
    from converter import cli

    source = tmp_path / "m.onnx"
    source.write_bytes(lower_case_model().SerializeToString())
    np.savez(tmp_path / "text.npz", text=np.array(["Hello World", "ABC"]))
    report = tmp_path / "report.json"
    assert cli.main(["convert", str(source), "-o", str(tmp_path / "m.lite"), "--allow-custom", "--custom-op-library",
                     extensions.get_library_path(), "--verify-data", str(tmp_path / "text.npz"), "--report",
                     str(report), "-q"]) == 0
    assert '"status": "passed"' in report.read_text()
