"""Verification verdicts on what real models bring: text outputs compared as text, and a failure
of onnx's reference implementation itself never turning a mismatch into a skipped check."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from passtools import scale_last_conv

import converter
from converter import api
from converter.errors import VerificationError
from converter.passes import DEFAULT_PASSES
from tests.converter.test_verification import _two_convs

pytest.importorskip("onnxruntime")


def test_a_string_output_verifies_though_the_engines_return_bytes_and_str(tmp_path):
    """The numpy engine carries text as bytes, ONNX Runtime returns str: every element of a
    label output counted as a difference (exit 4)."""
    table = numpy_helper.from_array(np.array(["cat", "dog", "owl"], dtype=object), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "index"], ["label"])], "labels",
                              [helper.make_tensor_value_info("index", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("label", TensorProto.STRING, ["N"])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification


def _failing(zeros_run: bool):
    """onnx's ReferenceEvaluator.run failing on every input, or on all but zeros."""

    def run(evaluator, names, feeds):
        if zeros_run and all(not np.any(value) for value in feeds.values()):
            return [np.zeros(1, np.float32)]
        raise ValueError("Need at least 0 and at most 64 array objects")

    return run


@pytest.mark.parametrize("zeros_run", [False, True], ids=["implementation-fails", "inputs-refused"])
def test_a_mismatch_stands_when_the_reference_implementation_fails_in_itself(tmp_path, monkeypatch, zeros_run):
    """numpy's 64-array limit in the reference's GatherElements failed every YOLOv10 end2end
    export: read as inputs outside the model's domain, verification was skipped, exit 0."""
    from onnx.reference import ReferenceEvaluator

    monkeypatch.setattr(api, "DEFAULT_PASSES", (*DEFAULT_PASSES, scale_last_conv))
    monkeypatch.setattr(ReferenceEvaluator, "run", _failing(zeros_run))
    if zeros_run:  # only the synthesized values are refused: they were outside the domain
        report = converter.convert(_two_convs(), tmp_path / "m.lite")
        assert report.verification.status == "skipped"
    else:
        with pytest.raises(VerificationError, match="First diverging node"):
            converter.convert(_two_convs(), tmp_path / "m.lite")


def test_fp16_io_is_verified_on_the_inputs_the_converted_model_can_be_given(tmp_path):
    """With ``fp16_io`` the converted model takes float16 inputs: the reference now runs on the
    same rounded values. y = sin(4096·x) failed on the rounding of x alone (cosine 0.60)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["t"]), helper.make_node("Sin", ["t"], ["y"])], "sensitive",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(np.array(4096, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = converter.convert(model, tmp_path / "m.lite", fp16=True, fp16_io=True)
    assert report.verification.status == "passed", report.verification
