"""int8-dynamic and int8-weight are checked against the float model as static int8 is: on the
verification inputs (synthesized, or --verify-data), with a warning where an output is ruined."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter


def _uneven_columns():
    """x [N, 96] @ w [96, 4]: one weight column ~1000x the others, so a single per-tensor scale
    rounds the small columns to zero while per-channel scales keep them."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((96, 4)).astype(np.float32)
    w[:, 0] *= 1000
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "uneven",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 96])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check_warnings(report):
    return [w for w in report.quantization.warnings if "against the float model" in w]


@pytest.mark.parametrize("mode", ["int8-dynamic", "int8-weight"])
def test_a_ruined_output_is_reported_on_synthesized_inputs(tmp_path, mode):
    report = converter.convert(_uneven_columns(), tmp_path / "q.lite", quant=mode, per_channel=False)
    assert report.quantization.evaluated_on == "synthesized"
    (warning,) = _check_warnings(report)
    assert "output 'y' (index " in warning and "of axis 1) has cosine" in warning and "synthesized samples" in warning
    assert "drop --per-tensor" in warning


@pytest.mark.parametrize("mode", ["int8-dynamic", "int8-weight"])
def test_per_channel_scales_pass_the_check(tmp_path, mode):
    report = converter.convert(_uneven_columns(), tmp_path / "q.lite", quant=mode)
    assert report.quantization.evaluation is not None and not _check_warnings(report)


def test_the_check_uses_the_verification_data(tmp_path):
    x = np.random.default_rng(3).standard_normal((5, 96)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    report = converter.convert(_uneven_columns(), tmp_path / "q.lite", quant="int8-dynamic", per_channel=False,
                               verify_data=str(tmp_path / "x.npz"))
    assert report.quantization.evaluated_on == "verification"
    assert report.quantization.evaluation.samples == 5
    assert "on 5 verification samples" in _check_warnings(report)[0]
