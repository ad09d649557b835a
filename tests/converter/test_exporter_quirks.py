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


def _saved_at_onnx_runtime_all_level(tmp_path) -> onnx.ModelProto:
    """Two Convs as ONNX Runtime saves them at its ALL optimization level: com.microsoft.nchwc
    Conv and ReorderOutput nodes, on CPUs whose kernels use the blocked layout."""
    import onnxruntime

    shapes = {"w1": (16, 3, 3, 3), "b1": (16,), "w2": (16, 16, 3, 3), "b2": (16,)}
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Conv", ["r", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])], "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 8, 8])],
        [numpy_helper.from_array(rng().normal(size=shape).astype(np.float32), name) for name, shape in shapes.items()],
    )
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "ortall.onnx")
    options.log_severity_level = 3  # its warning that the saved model is hardware specific: what is tested
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    saved = onnx.load(tmp_path / "ortall.onnx")
    if not any(node.domain == "com.microsoft.nchwc" for node in saved.graph.node):
        pytest.skip("ONNX Runtime wrote no nchwc nodes on this CPU")
    return saved


def test_onnx_runtime_nchwc_layout_converts_and_runs_on_its_cpu_engine(tmp_path):
    """A model saved by ONNX Runtime at its ALL level holds its CPU-specific nchwc ops: it converts
    without --allow-custom, is verified on lite's ONNX Runtime engine, runs with device="cpu",
    and the warning says what those nodes are and how to get a portable model."""
    import onnxruntime

    model = _saved_at_onnx_runtime_all_level(tmp_path)
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed and "ONNX Runtime engine" in report.verification.engine
    (warning,) = [w for w in report.warnings if "com.microsoft.nchwc" in w and "no numpy kernel" in w]
    assert "CPU-specific" in warning and "ORT_ENABLE_EXTENDED" in warning
    x = rng().normal(size=(2, 3, 8, 8)).astype(np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = lite.Model.load(tmp_path / "m.lite", device="cpu", cache_dir=None)(x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_converted_model_that_cannot_run_is_not_called_a_numerical_difference():
    """When the converted model fails to run, nothing was compared: the message says so and
    suggests no tolerance."""
    from converter.verify import FAILED, Verification
    from converter.verify_output import failure_message
    from lite.compare import Tolerance

    verification = Verification("lite.Model (numpy engine)", Tolerance(1e-4, 1e-6), status=FAILED,
                                reason="the converted model fails in lite.Model (numpy engine) on inputs the "
                                       "original runs on (no kernel for example.custom::Scramble)",
                                inputs="synthesized: x[1, 4]")
    message = failure_message(verification)
    assert "did not run" in message and "Scramble" in message
    assert "--rtol" not in message and "differs" not in message


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
