"""What other exporters write, converted with default options."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from passtools import rng

import converter
import lite
from lite.format import to_bytes

pytest.importorskip("onnxruntime")


def _paddle_like_conv() -> onnx.ModelProto:
    """paddle2onnx declares dynamic sizes as -1: x is [-1, 3, -1, -1]."""
    weight = numpy_helper.from_array(rng().normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "paddle_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, -1, -1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 8, -1, -1])], [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_minus_one_dimensions_are_unknown_sizes(tmp_path):
    report = converter.convert(_paddle_like_conv(), tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    model = lite.Model.load(tmp_path / "m.lite", device="numpy")
    (spec,) = model.inputs
    assert spec.shape[1] == 3 and not isinstance(spec.shape[0], int) and not isinstance(spec.shape[2], int)
    x = rng().normal(size=(2, 3, 10, 12)).astype(np.float32)
    assert model(x).shape == (2, 8, 10, 12)


def test_onnx_runtime_contrib_ops_convert_and_run_on_onnx_runtime(tmp_path):
    """ONNX Runtime's own ops (com.microsoft, as its quantizer and optimizer write them) that have
    no numpy kernel (Inverse here): the model converts by default, is verified on lite's ONNX
    Runtime engine, and says where it runs."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["h"]),
         helper.make_node("Inverse", ["h"], ["y"], domain="com.microsoft")],
        "contrib",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 3])],
        [numpy_helper.from_array((2 * np.eye(3)).astype(np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed and "ONNX Runtime engine" in report.verification.engine
    assert any("com.microsoft" in warning and "Inverse" in warning for warning in report.warnings)
    x = (np.eye(3) + 0.1 * rng().normal(size=(2, 3, 3))).astype(np.float32)
    got = lite.Model.load(tmp_path / "m.lite", device="cpu", cache_dir=None)(x)
    np.testing.assert_allclose(got, np.linalg.inv(2 * x), rtol=1e-4)
    with pytest.raises(lite.UnsupportedOpError, match="Inverse(.|\n)*device='cpu'"):
        lite.Model.load(tmp_path / "m.lite", device="numpy")


def test_a_question_mark_names_no_size():
    """paddle2onnx writes [-1, 3, ?, ?]: the two "?" axes are independent unknown sizes."""
    proto = _paddle_like_conv()
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "?", "?"
    model = lite.Model.load(to_bytes(converter.convert_model(proto)), device="numpy")
    x = rng().normal(size=(1, 3, 48, 192)).astype(np.float32)
    assert model(x).shape == (1, 8, 48, 192)



def test_repeated_node_names_convert_and_are_verified(tmp_path):
    """ONNX allows two nodes one name (some exporters write them); ONNX Runtime refuses such a
    file, so the reference it runs gets unique names, and the check still runs."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n"), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Sigmoid", ["b"], ["y"], name="")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    report = converter.convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                               tmp_path / "m.lite")
    assert report.verification.passed, report.verification.reason


def test_a_graph_without_outputs_is_refused(tmp_path):
    """An exporter that lost the output list: the converted model would return nothing."""
    from converter.errors import ModelImportError

    model = _paddle_like_conv()
    del model.graph.output[:]
    with pytest.raises(ModelImportError, match="graph 'paddle_like' declares no outputs, so the model computes nothing"):
        converter.convert(model, tmp_path / "m.lite")
    assert not (tmp_path / "m.lite").exists()


def test_a_model_missing_its_weights_gets_one_error_not_a_warning_per_weight(tmp_path, caplog):
    from converter.errors import ModelImportError

    model = _paddle_like_conv()
    del model.graph.initializer[:]
    with caplog.at_level("WARNING"), pytest.raises(ModelImportError, match="reads 'w', which no graph input"):
        converter.convert(model, tmp_path / "m.lite")
    assert not [record for record in caplog.records if "cannot be found in any scope" in record.getMessage()]


@pytest.mark.parametrize("as_constant_node", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_a_dropout_left_in_training_mode_is_warned_of(tmp_path, training, as_constant_node):
    # PyTorch writes Dropout(training_mode=True) for a module not put in eval mode: the output
    # is then random on every call.
    from onnx import numpy_helper

    flag = numpy_helper.from_array(np.array(training), "train")
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio")]
    nodes = [onnx.helper.make_node("Constant", [], ["train"], value=flag)] if as_constant_node else []
    inits += [] if as_constant_node else [flag]
    nodes.append(onnx.helper.make_node("Dropout", ["x", "ratio", "train"], ["y"], name="drop"))
    graph = onnx.helper.make_graph(nodes, "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    report = converter.convert(model, tmp_path / "m.lite", verify=False)
    warned = [warning for warning in report.warnings if "training mode" in warning]
    assert bool(warned) == training
    if training:
        assert "'drop'" in warned[0] and "model.eval()" in warned[0]
