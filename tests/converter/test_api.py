"""converter.convert / convert_model and the ``lite convert`` CLI: options, errors, outputs."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from models import resnet18
from onnx import TensorProto, helper, numpy_helper
from passtools import make_model, rng, scale_last_conv

import converter
from converter import cli
from converter.errors import (
    ConverterError,
    InvalidOptionError,
    ModelImportError,
    UnsupportedOpsError,
    VerificationError,
)


def _small() -> onnx.ModelProto:
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 8, 8] input) => (float[N, 4, 8, 8] output) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (input, w)
            b = BatchNormalization (h, gamma, beta, mean, var)
            output = Relu (b)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        gamma=np.full(4, 1.5, np.float32),
        beta=np.full(4, 0.1, np.float32),
        mean=np.full(4, 0.2, np.float32),
        var=np.full(4, 2.0, np.float32),
    )


def test_convert_writes_lite_with_report(tmp_path):
    report_path = tmp_path / "report.json"
    report = converter.convert(_small(), tmp_path / "m.lite", report_path=report_path)
    data = json.loads(report_path.read_text())
    assert data["before"]["ops"]["BatchNormalization"] == 1 and "BatchNormalization" not in data["after"]["ops"]
    assert {p["name"] for p in data["passes"]} >= {"fold_batchnorm", "fuse_activation"}
    assert data["verification"]["passed"]
    assert report.after.nodes == 1
    assert "fold_batchnorm" in report.table()


def test_input_shape_and_dynamic_batch(tmp_path):
    from lite.format import load

    converter.convert(_small(), tmp_path / "fixed.lite", input_shapes={"input": [2, 3, 8, 8]})
    assert load(tmp_path / "fixed.lite").main.tensors[0].shape == (2, 3, 8, 8)
    model = converter.convert_model(resnet18("mindspore", image_size=32), dynamic_batch=True)
    assert model.main.tensors[model.main.inputs[0]].shape[0] == "batch"


def test_dynamic_batch_conversion_verifies_at_batch_two(tmp_path):
    report = converter.convert(_small(), tmp_path / "m.onnx", dynamic_batch=True)
    assert report.verification.passed


def _recurrent() -> onnx.ModelProto:
    """Silero VAD's signature: audio [batch, sequence] and an LSTM state [2, batch, 4] sharing the
    batch by name; ONNX Runtime rejects a state whose batch differs from the audio's."""
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, sequence] input, float[2, batch, 4] state) => (float[batch, 4] output) {
            zero = Constant <value: tensor = int64[1] {0}> ()
            one = Constant <value: tensor = int64[1] {1}> ()
            two = Constant <value: tensor = int64[1] {2}> ()
            x = Unsqueeze (input, zero)
            features = Slice (x, zero, eight, two)
            h0 = Gather <axis: int = 0> (state, zero)
            c0 = Gather <axis: int = 0> (state, one)
            y, yh, yc = LSTM <hidden_size: int = 4> (features, w, r, , , h0, c0)
            output = Squeeze (yh, zero)
        }""",
        eight=np.array([8], np.int64),
        w=rng().normal(size=(1, 16, 8)).astype(np.float32),
        r=rng().normal(size=(1, 16, 4)).astype(np.float32),
    )


def test_input_shape_fixes_a_named_dimension_on_every_input_that_shares_it(tmp_path):
    """``input:1,576`` fixes ``batch`` at 1, so the state is [2, 1, 4]: not a state still open
    at ``batch``, which the verification then made 2 and the original rejected (verification skipped)."""
    from lite.format import load

    report = converter.convert(_recurrent(), tmp_path / "m.lite", input_shapes={"input": [1, 576]})
    assert report.verification.passed, report.verification.to_dict()
    main = load(tmp_path / "m.lite").main
    assert [main.tensors[index].shape for index in main.inputs] == [(1, 576), (2, 1, 4)]
    assert main.tensors[main.outputs[0]].shape == (1, 4)
    with pytest.raises(InvalidOptionError, match=r"dimension 'batch' two sizes: 1 \(input dimension 0\) and 3"):
        converter.convert(_recurrent(), tmp_path / "x.lite", input_shapes={"input": [1, 576], "state": [2, 3, 4]})


def test_unknown_input_name_is_an_option_error(tmp_path):
    with pytest.raises(InvalidOptionError, match="not inputs of the model"):
        converter.convert(_small(), tmp_path / "m.lite", input_shapes={"image": [1, 3, 8, 8]})


def test_input_shape_cannot_change_a_size_the_model_fixes(tmp_path):
    """The model fixes 3 channels: 4 would write a model that fails at run time."""
    message = r"--input-shape input:1,4,8,8: dimension 1 is fixed at 3 by the model, 4 given .*input\[N, 3, 8, 8\]"
    with pytest.raises(InvalidOptionError, match=message):
        converter.convert(_small(), tmp_path / "m.lite", input_shapes={"input": [1, 4, 8, 8]}, verify=False)
    assert not os.listdir(tmp_path)
    onnx.save(_small(), tmp_path / "m.onnx")
    code = _cli(str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.lite"), "--input-shape", "input:1,3,8,9")
    assert code == 2 and not (tmp_path / "m.lite").exists()


def test_bad_extension_and_missing_file(tmp_path):
    with pytest.raises(InvalidOptionError, match=".lite or .onnx"):
        converter.convert(_small(), tmp_path / "m.tflite")
    with pytest.raises(ModelImportError, match="no such file"):
        converter.convert(tmp_path / "missing.onnx", tmp_path / "m.lite")


def test_an_output_directory_asks_for_a_file_name(tmp_path):
    with pytest.raises(InvalidOptionError, match="is a directory; name the file to write, e.g. .*model.lite"):
        converter.convert(_small(), tmp_path)
    with pytest.raises(InvalidOptionError, match="got none$"):
        converter.convert(_small(), tmp_path / "model")


def test_an_output_folder_that_is_missing_is_named_before_converting(tmp_path):
    with pytest.raises(InvalidOptionError, match=r"the folder .*absent does not exist; create it"):
        converter.convert(_small(), tmp_path / "absent" / "m.lite")
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidOptionError, match=r"the folder .*file is not a folder"):
        converter.convert(_small(), tmp_path / "file" / "m.lite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_output_that_is_the_source_file_is_refused(tmp_path, capsys):
    """``lite convert m.onnx -o m.onnx`` (or through a link, or another spelling of the path)
    would replace the original with its conversion: refused, the source left as it was."""
    source = tmp_path / "m.onnx"
    onnx.save(_small(), source)
    original = source.read_bytes()
    (tmp_path / "link.onnx").symlink_to(source)
    for output in (source, tmp_path / "." / "m.onnx", tmp_path / "link.onnx"):
        with pytest.raises(InvalidOptionError, match="is the model file .* itself"):
            converter.convert(source, output, verify=False)
    assert _cli(str(source), "-o", str(source)) == 2
    assert "would replace the original" in capsys.readouterr().err
    assert source.read_bytes() == original
    converter.convert(source, tmp_path / "m2.onnx", verify=False)


def _custom_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Swish2", ["x"], ["a"], name="first", domain="com.example"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Swish2", ["b"], ["y"], name="second", domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def test_unsupported_ops_are_all_listed_and_no_file_is_left(tmp_path):
    output = tmp_path / "m.lite"
    with pytest.raises(UnsupportedOpsError) as caught:
        converter.convert(_custom_model(), output, verify=False)
    assert [name for name, _, _ in caught.value.unsupported] == ["first", "second"]
    assert "first" in str(caught.value) and "second" in str(caught.value) and "--allow-custom" in str(caught.value)
    assert isinstance(caught.value, NotImplementedError) and isinstance(caught.value, ConverterError)
    assert list(tmp_path.iterdir()) == []


def test_allow_custom_keeps_the_nodes(tmp_path):
    from lite.format import load

    report = converter.convert(_custom_model(), tmp_path / "m.lite", verify=False, allow_custom=True)
    assert len(report.custom_ops) == 2
    model = load(tmp_path / "m.lite")
    assert json.loads(model.metadata["lite.custom_ops"]) == ["first", "second"]
    assert [n.domain for n in model.main.nodes] == ["com.example", "", "com.example"]


def test_failed_verification_leaves_no_output_but_a_report(tmp_path, monkeypatch):
    from converter import api
    from converter.passes import DEFAULT_PASSES

    monkeypatch.setattr(api, "DEFAULT_PASSES", (*DEFAULT_PASSES, scale_last_conv))
    output, report_path = tmp_path / "m.onnx", tmp_path / "r.json"
    with pytest.raises(VerificationError, match="differs from the original"):
        converter.convert(_small(), output, report_path=report_path)
    assert not output.exists()
    assert json.loads(report_path.read_text())["verification"]["passed"] is False
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_opset_28_model_is_stamped_for_onnxruntime(tmp_path):
    model = make_model('<ir_version: 14, opset_import: ["" : 28]>\ng (float[3] x) => (float[3] y) { y = Relu (x) }')
    converter.convert(model, tmp_path / "m.onnx")
    written = onnx.load(tmp_path / "m.onnx")
    assert written.ir_version <= 11 and written.opset_import[0].version == 26


def test_external_data_and_constant_weights(tmp_path):
    model = _small()
    source = tmp_path / "ext.onnx"
    onnx.save_model(model, source, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data", size_threshold=0)
    report = converter.convert(source, tmp_path / "m.lite")
    assert report.verification.passed and report.before.parameter_bytes > 0
    constant_weights = _small()  # save_model above moved the weights of `model` out
    for init in list(constant_weights.graph.initializer):
        constant_weights.graph.node.insert(0, helper.make_node("Constant", [], [init.name], value=init))
    del constant_weights.graph.initializer[:]
    report = converter.convert(constant_weights, tmp_path / "c.lite")
    assert "BatchNormalization" not in report.after.ops and report.verification.passed


def test_if_subgraph_reading_outer_values_converts(tmp_path):
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])]
    )
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])]
    )
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w"), numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed
    lite_model = converter.convert_model(model)
    then_index = lite_model.main.nodes[-1].attributes["then_branch"].value
    captured = [lite_model.graphs[then_index].tensors[i].name for i in lite_model.graphs[then_index].captures]
    assert sorted(captured) == ["w", "x"]


def test_fp16_lite_is_smaller_and_verifies(tmp_path):
    model = resnet18("legacy", image_size=32)
    fp32 = converter.convert(model, tmp_path / "a.lite")
    fp16 = converter.convert(model, tmp_path / "b.lite", fp16=True)
    assert fp16.verification.passed and fp16.verification.rtol == 1e-2
    assert (tmp_path / "b.lite").stat().st_size < 0.6 * (tmp_path / "a.lite").stat().st_size
    assert fp32.after.parameter_bytes > 1.9 * fp16.after.parameter_bytes


def _cli(*argv: str) -> int:
    return cli.main(["convert", *argv])


def test_cli_converts_and_prints_table(tmp_path, capsys):
    source = tmp_path / "m.onnx"
    onnx.save(_small(), source)
    code = _cli(str(source), "-o", str(tmp_path / "m.lite"), "--input-shape", "input:1,3,8,8", "--report", str(tmp_path / "r.json"))
    assert code == 0
    out = capsys.readouterr().out
    assert "fold_batchnorm" in out and "verify" in out
    assert (tmp_path / "r.json").exists()


def test_cli_errors_are_one_line(tmp_path, capsys):
    source = tmp_path / "m.onnx"
    onnx.save(_small(), source)
    assert _cli(str(source), "-o", str(tmp_path / "m.lite"), "--input-shape", "input=1") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lite convert: error:") and "Traceback" not in err
    assert _cli(str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "m.lite")) == 1


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="lite.commands")}
    assert names.get("convert") == "converter.cli:register"


def test_outputs_are_not_written_through_symlinks_at_old_temporary_names(tmp_path):
    """A symlink planted where a temporary file of this process could be expected (the old
    ``.NAME.<pid>.tmp`` names) must not redirect the output or the report onto another file."""
    import os

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    output, report_path = tmp_path / "m.onnx", tmp_path / "r.json"
    for planted in (f".m.onnx.{os.getpid()}.tmp", f".r.json.tmp{os.getpid()}", f".r.json.{os.getpid()}.tmp"):
        (tmp_path / planted).symlink_to(victim)
    converter.convert(_small(), output, report_path=report_path, verify=False)
    assert victim.read_text() == "keep me"
    assert not output.is_symlink() and onnx.load(output).graph.node
    assert not report_path.is_symlink() and json.loads(report_path.read_text())["output"] == str(output)


def test_a_file_name_that_is_not_utf8_converts(tmp_path):
    """A latin-1 file name ("mod\\xe8le.onnx") reads as a surrogate escape, which the metadata's
    UTF-8 could not encode: the conversion failed and wrote nothing."""
    import lite

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    folder = os.fsencode(tmp_path)
    source = os.fsdecode(folder + b"/mod\xe8le.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)
    output = os.fsdecode(folder + b"/mod\xe8le.lite")
    converter.convert(source, output)
    assert lite.Model.load(output).metadata["source"] == "mod\ufffdle.onnx"
