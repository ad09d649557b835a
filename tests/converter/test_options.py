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
    "quant_options", "progress", "external_data_dir", "custom_op_libraries",
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


SPEC = {"resize": 8, "crop": 8}


@pytest.mark.parametrize("quant, suffix", [(None, ".lite"), ("fp16", ".lite"), (None, ".onnx")])
def test_the_preprocessing_spec_is_stored_without_int8(tmp_path, quant, suffix):
    path = tmp_path / f"m{suffix}"
    converter.convert(_model(), path, quant=quant, preprocessing=json.dumps(SPEC), verify=False)
    if suffix == ".lite":
        import lite

        metadata = lite.Model.load(str(path), device="numpy").metadata
    else:
        import onnx

        metadata = {prop.key: prop.value for prop in onnx.load(str(path)).metadata_props}
    assert json.loads(metadata["preprocessing"]) == SPEC


def test_the_command_line_stores_the_preprocessing_spec_without_quant(tmp_path):
    import onnx

    from converter.cli import main

    onnx.save(_model(), tmp_path / "m.onnx")
    code = main(["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.lite"), "--preprocess",
                 json.dumps(SPEC), "--no-verify", "-q"])
    assert code == 0
    import lite

    assert json.loads(lite.Model.load(str(tmp_path / "m.lite"), device="numpy").metadata["preprocessing"]) == SPEC


def test_a_preprocessing_spec_that_does_not_fit_the_model_is_refused(tmp_path):
    with pytest.raises(InvalidOptionError, match="'image' is not an input of the model"):
        converter.convert(_model(), tmp_path / "m.lite", preprocessing={**SPEC, "input": "image"}, verify=False)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("keywords, message", [
    ({"calibration_data": "calib/"}, "applies to quant 'int8'"),
    ({"calibration_data": "calib/", "quant": "int8-dynamic"}, "applies to quant 'int8'"),
    ({"eval_data": "eval/"}, "eval_data .* needs quant int8"),
    ({"eval_data": "eval/", "quant": "fp16"}, "eval_data .* needs quant int8"),
    ({"max_accuracy_drop": 1.0, "quant": "fp16"}, "max_accuracy_drop .* needs quant int8"),
])
def test_quantization_data_where_it_would_be_ignored_is_refused(tmp_path, keywords, message):
    with pytest.raises(InvalidOptionError, match=message):
        converter.convert(_model(), tmp_path / "m.lite", verify=False, **keywords)
    assert not os.listdir(tmp_path)


def test_the_command_line_refuses_calib_without_quant_int8(tmp_path, capsys):
    import onnx

    from converter.cli import main

    onnx.save(_model(), tmp_path / "m.onnx")
    (tmp_path / "calib").mkdir()
    assert main(["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.lite"), "--calib",
                 str(tmp_path / "calib")]) == 2
    assert "--quant int8" in capsys.readouterr().err
    assert not (tmp_path / "m.lite").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--exclude", "conv1"], "--exclude applies to --quant int8 / int8-dynamic / int8-weight, not to no --quant"),
    (["--per-tensor", "--quant", "fp16"], "--per-channel/--per-tensor applies to .* not to --quant fp16"),
    (["--calib-method", "entropy", "--quant", "int8-dynamic"], "--calib-method applies to --quant int8, not to"),
    (["--calib-size", "8"], "--calib-size applies to --quant int8, not to no --quant"),
    (["--activation-type", "int8", "--quant", "int8-weight"], "--activation-type applies to --quant int8, not"),
])
def test_the_command_line_refuses_quantization_tuning_without_its_mode(tmp_path, capsys, arguments, message):
    import re

    import onnx

    from converter.cli import main

    onnx.save(_model(), tmp_path / "m.onnx")
    assert main(["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.lite"), *arguments]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "m.lite").exists()
