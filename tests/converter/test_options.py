"""converter.convert's options: keywords and the grouped ConvertOptions are one list."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
from passtools import make_model, rng

import converter
from converter.errors import InvalidOptionError
from converter.options import ConvertOptions, GraphOptions, QuantizeOptions, VerifyOptions


def _model():
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] input) => (float[1, 4, 8, 8] output) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (input, w)
            output = Relu (h)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
    )


# The keywords convert() has always taken (lite convert passes them all).
KEYWORDS = {
    "input_shapes", "dynamic_batch", "fp16", "fp16_io", "verify", "allow_custom", "optimize", "report_path", "rtol",
    "atol", "verify_data", "network", "network_input_shape", "dec_key", "dec_mode", "quant", "calibration_data",
    "calibration_method", "calibration_size", "per_channel", "eval_data", "max_accuracy_drop", "preprocessing",
    "quant_options", "progress", "external_data_dir",
}


def test_every_keyword_is_the_field_of_one_group():
    groups = {f.name: f.type for f in dataclasses.fields(ConvertOptions)}
    owner = {}
    for group in dataclasses.fields(ConvertOptions):
        value = getattr(ConvertOptions(), group.name)
        for name in [f.name for f in dataclasses.fields(value)] if dataclasses.is_dataclass(value) else [group.name]:
            assert name not in owner, name
            owner[name] = group.name
    assert set(owner) == KEYWORDS and set(groups) == set(owner.values())
    marker = object()
    for name, group in owner.items():
        replaced = ConvertOptions().replace(**{name: marker})
        found = getattr(replaced, group)
        assert (found if found is marker else getattr(found, name)) is marker, name


def test_keywords_and_grouped_options_write_the_same_model(tmp_path):
    by_keywords = converter.convert(_model(), tmp_path / "a.lite", fp16=True, rtol=1e-3, verify=False,
                                    report_path=tmp_path / "a.json")
    options = ConvertOptions(graph=GraphOptions(fp16=True), verification=VerifyOptions(verify=False, rtol=1e-3),
                             report_path=tmp_path / "b.json")
    by_options = converter.convert(_model(), tmp_path / "b.lite", options=options)
    assert by_keywords.options == by_options.options and by_options.options["fp16"] is True
    assert json.loads((tmp_path / "b.json").read_text())["options"] == by_options.options
    assert (tmp_path / "a.lite").read_bytes() == (tmp_path / "b.lite").read_bytes()


def test_keywords_replace_grouped_values(tmp_path):
    options = ConvertOptions(graph=GraphOptions(fp16=True, optimize=False))
    report = converter.convert(_model(), tmp_path / "m.lite", options=options, fp16=False, verify=False)
    assert report.options["fp16"] is False and report.options["optimize"] is False


def test_fp16_io_and_quant_fp16_store_float16_weights():
    assert ConvertOptions().replace(fp16_io=True).settled().graph.fp16
    assert ConvertOptions().replace(quant="fp16").settled().graph.fp16
    assert not ConvertOptions().settled().graph.fp16


def test_an_unknown_keyword_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument.*fp61"):
        converter.convert(_model(), tmp_path / "m.lite", fp61=True)
    assert not os.listdir(tmp_path)


def test_option_checks_are_invalid_option_errors():
    with pytest.raises(InvalidOptionError, match="needs quant"):
        QuantizeOptions(max_accuracy_drop=1.0).config()
    with pytest.raises(InvalidOptionError, match="tolerances are >= 0"):
        VerifyOptions(rtol=float("nan")).tolerance(fp16=False)
    assert VerifyOptions().tolerance(fp16=True) == VerifyOptions(rtol=1e-2, atol=1e-3).tolerance(fp16=False)
