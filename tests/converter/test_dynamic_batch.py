"""``--dynamic-batch`` is checked on the converted model: it must run one batch larger, and its
outputs must lead with the batch, or the conversion is refused with what to do."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from passtools import make_model

import converter
from converter import cli
from converter.errors import InvalidOptionError
from lite.format import load


def _model(text: str, **initializers) -> onnx.ModelProto:
    return make_model('<ir_version: 8, opset_import: ["" : 17]>\n' + text, **initializers)


def test_a_batchable_model_converts_with_its_outputs_labelled(tmp_path):
    model = _model("""g (float[1, 4] x) => (float[1, 4] y) { y = Relu (x) }""")
    report = converter.convert(model, tmp_path / "m.lite", dynamic_batch=True)
    assert report.verification.passed
    written = load(tmp_path / "m.lite").main
    assert written.tensors[written.inputs[0]].shape == ("batch", 4)
    assert written.tensors[written.outputs[0]].shape[0] == "batch"


def test_a_reshape_to_a_fixed_batch_is_refused_and_nothing_is_written(tmp_path):
    model = _model(
        """g (float[1, 2, 3] x) => (float[1, 6] y) { y = Reshape (x, shape) }""",
        shape=np.array([1, -1], np.int64),
    )
    with pytest.raises(InvalidOptionError, match=r"--dynamic-batch: at batch size 2 output\(s\) do not lead with "
                       r"the batch \(y has shape \[1, 12\]\)"):
        converter.convert(model, tmp_path / "m.lite", dynamic_batch=True)
    assert not os.listdir(tmp_path)


def test_a_model_that_fails_one_batch_larger_is_refused(tmp_path):
    """A Reshape to the constant [1, 2, 2] cannot hold a batch of two rows of 4."""
    model = _model(
        """g (float[1, 4] x) => (float[1, 2, 2] y) { y = Reshape (x, shape) }""",
        shape=np.array([1, 2, 2], np.int64),
    )
    with pytest.raises(InvalidOptionError, match="--dynamic-batch: the converted model fails at batch size 2"):
        converter.convert(model, tmp_path / "m.lite", dynamic_batch=True)


def test_an_output_with_the_batch_second_is_refused(tmp_path):
    model = _model("""g (float[1, 3, 4] x) => (float[3, 1, 4] y) { y = Transpose <perm: ints = [1, 0, 2]> (x) }""")
    with pytest.raises(InvalidOptionError, match=r"y has shape \[3, 2, 4\]"):
        converter.convert(model, tmp_path / "m.lite", dynamic_batch=True)
    converter.convert(model, tmp_path / "m.lite")  # without the option it converts


def test_inputs_of_different_leading_sizes_cannot_share_a_batch(tmp_path):
    model = _model("""g (float[1, 4] a, float[2, 4] b) => (float[2, 4] y) { y = Add (a, b) }""")
    with pytest.raises(InvalidOptionError, match=r"first dimensions differ \(a: 1, b: 2\)"):
        converter.convert(model, tmp_path / "m.lite", dynamic_batch=True)


def test_the_cli_exits_2_naming_the_option(tmp_path, capsys):
    onnx.save(_model("""g (float[1, 3, 4] x) => (float[3, 1, 4] y) { y = Transpose <perm: ints = [1, 0, 2]> (x) }"""),
              tmp_path / "m.onnx")
    code = cli.main(["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.lite"), "--dynamic-batch"])
    assert code == 2 and not (tmp_path / "m.lite").exists()
    assert "--dynamic-batch" in capsys.readouterr().err
