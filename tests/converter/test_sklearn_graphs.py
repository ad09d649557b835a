"""Graphs as skl2onnx writes them for scikit-learn models (ai.onnx.ml ops), converted with default
options. Built with onnx.helper, so the tests need neither skl2onnx nor scikit-learn."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import converter
import lite
from converter import api
from converter.errors import ModelImportError, VerificationError
from converter.passes import DEFAULT_PASSES
from converter.passes.base import PassResult

pytest.importorskip("onnxruntime")

_OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]


def _zipmap_classifier() -> onnx.ModelProto:
    """A LogisticRegression with skl2onnx's default ZipMap: probabilities as a list of dicts."""
    linear = helper.make_node(
        "LinearClassifier", ["X"], ["label", "probability_tensor"], domain="ai.onnx.ml",
        classlabels_ints=[0, 1], coefficients=[0.5, -0.25, -0.5, 0.25], intercepts=[0.1, -0.1],
        multi_class=1, post_transform="LOGISTIC",
    )
    zipmap = helper.make_node("ZipMap", ["probability_tensor"], ["output_probability"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1], name="ZipMap")
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    graph = helper.make_graph(
        [linear, zipmap], "sklearn_like",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_value_info("output_probability", helper.make_sequence_type_proto(map_type))],
    )
    return helper.make_model(graph, opset_imports=_OPSETS)


def test_a_zipmap_output_converts_to_its_probabilities_with_the_labels_kept(tmp_path):
    original = _zipmap_classifier()
    before = original.SerializeToString()
    report = converter.convert(original, tmp_path / "m.lite")
    assert original.SerializeToString() == before  # the caller's model is not rewritten
    assert report.verification.status == "passed"
    assert any("'output_probability' was a sequence of maps (ZipMap)" in w and "[0, 1]" in w for w in report.warnings)
    model = lite.Model.load(tmp_path / "m.lite", device="numpy")
    assert json.loads(model.metadata["class_labels"]) == {"output_probability": [0, 1]}
    x = np.array([[1.0, -2.0], [0.5, 3.0], [0.0, 0.0]], np.float32)
    got = model.predict({"X": x})
    import onnxruntime as ort

    session = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    label, maps = session.run(None, {"X": x})
    expected = np.array([[row[0], row[1]] for row in maps], np.float32)
    assert got["output_probability"].shape == (3, 2)
    np.testing.assert_allclose(got["output_probability"], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got["label"], label)


def test_a_classifier_importing_only_the_ml_domain_converts(tmp_path):
    """CatBoost's own ONNX export imports ai.onnx.ml alone; the ZipMap's rewrite into an
    Identity must bring the default domain's opset with it (the import refused the Identity)."""
    original = _zipmap_classifier()
    del original.opset_import[:]
    original.opset_import.append(helper.make_opsetid("ai.onnx.ml", 2))
    original.ir_version = 8
    report = converter.convert(original, tmp_path / "m.lite")
    assert report.verification.status == "passed"
    model = lite.Model.load(tmp_path / "m.lite", device="numpy")
    assert model.predict({"X": np.zeros((2, 2), np.float32)})["output_probability"].shape == (2, 2)


def test_zipmap_string_labels_are_kept_in_their_order(tmp_path):
    original = _zipmap_classifier()
    zipmap = original.graph.node[1]
    del zipmap.attribute[:]
    zipmap.attribute.append(helper.make_attribute("classlabels_strings", ["cat", "dog"]))
    original.graph.output[1].type.sequence_type.elem_type.map_type.key_type = TensorProto.STRING
    converter.convert(original, tmp_path / "m.lite")
    model = lite.Model.load(tmp_path / "m.lite", device="numpy")
    assert json.loads(model.metadata["class_labels"]) == {"output_probability": ["cat", "dog"]}


def test_a_zipmap_read_by_another_node_is_refused_naming_the_node_and_the_tensor_to_use(tmp_path):
    original = _zipmap_classifier()
    original.graph.node.append(helper.make_node("Identity", ["output_probability"], ["again"]))
    with pytest.raises(ModelImportError) as caught:
        converter.convert(original, tmp_path / "m.lite")
    message = str(caught.value)
    assert "'output_probability' is a sequence(map(int64, tensor(float)))" in message
    assert "ZipMap node 'ZipMap'" in message and "'probability_tensor'" in message
    assert "zipmap" in message and "malformed" not in message


def _scaled_classifier() -> onnx.ModelProto:
    """StandardScaler -> LogisticRegression (binary) without ZipMap, as skl2onnx writes it."""
    scaler = helper.make_node("Scaler", ["X"], ["scaled"], domain="ai.onnx.ml", offset=[0.5, -1.0, 2.0],
                              scale=[2.0, 0.5, 0.25])
    linear = helper.make_node(
        "LinearClassifier", ["scaled"], ["label", "probabilities"], domain="ai.onnx.ml", classlabels_ints=[0, 1],
        coefficients=[-0.5, 0.25, -1.0, 0.5, -0.25, 1.0], intercepts=[-0.1, 0.1], post_transform="LOGISTIC",
    )
    normalizer = helper.make_node("Normalizer", ["probabilities"], ["probability"], domain="ai.onnx.ml", norm="L1")
    graph = helper.make_graph(
        [scaler, linear, normalizer], "sklearn_like",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("probability", TensorProto.FLOAT, [None, 2])],
    )
    return helper.make_model(graph, opset_imports=_OPSETS)


def _forest_regressor() -> onnx.ModelProto:
    """A two-tree forest regressor (TreeEnsembleRegressor, ai.onnx.ml 3) averaging its leaves."""
    forest = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["variable"], domain="ai.onnx.ml", n_targets=1, aggregate_function="AVERAGE",
        nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2], nodes_featureids=[1, 0, 0, 2, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_values=[0.1, 0.0, 0.0, -0.3, 0.0, 0.0], nodes_truenodeids=[1, 0, 0, 1, 0, 0],
        nodes_falsenodeids=[2, 0, 0, 2, 0, 0], target_treeids=[0, 0, 1, 1], target_nodeids=[1, 2, 1, 2],
        target_ids=[0, 0, 0, 0], target_weights=[10.0, 20.0, -4.0, 4.0],
    )
    graph = helper.make_graph(
        [forest], "sklearn_like", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])],
    )
    return helper.make_model(graph, opset_imports=_OPSETS)


@pytest.mark.parametrize("make", [_scaled_classifier, _forest_regressor])
@pytest.mark.parametrize("device", ["numpy", "auto"])
def test_scikit_learn_predictors_convert_verify_and_run(tmp_path, make, device):
    import onnxruntime

    proto = make()
    report = converter.convert(proto, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    x = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"X": x})))
    got = lite.Model.load(tmp_path / "m.lite", device=device).predict({"X": x})
    for name, want in expected.items():
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], want, err_msg=name)


def _gradient_boosting_binary() -> onnx.ModelProto:
    """skl2onnx's binary GradientBoostingClassifier: TreeEnsembleClassifier, then an Identity to
    the declared output, importing ai.onnx.ml 1, whose TreeEnsembleClassifier ONNX's shape
    inference gives no output types."""
    forest = helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "probability_tensor"], domain="ai.onnx.ml",
        classlabels_int64s=[0, 1], base_values=[0.2], post_transform="LOGISTIC",
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.1, 0.0, 0.0], nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 0],
        class_weights=[-1.5, 2.0],
    )
    graph = helper.make_graph(
        [forest, helper.make_node("Identity", ["probability_tensor"], ["probabilities"])], "sklearn_like",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])


def test_a_bypassed_identity_keeps_the_declared_output_type(tmp_path):
    converter.convert(_gradient_boosting_binary(), tmp_path / "m.lite")
    outputs = {spec.name: spec for spec in lite.Model.load(tmp_path / "m.lite", device="numpy").outputs}
    assert outputs["probabilities"].dtype == np.float32, outputs
    assert outputs["probabilities"].shape == (None, 2), outputs


def _scale_the_scaler(model, context):
    """A deliberately wrong rewrite: the Scaler's scales double."""
    scaler = next(node for node in model.graph if node.op_type == "Scaler")
    doubled = [2 * scale for scale in scaler.attributes["scale"].value]
    scaler.attributes["scale"] = ir.Attr("scale", ir.AttributeType.FLOATS, doubled)
    return PassResult("scale_the_scaler", changed=1)


def test_a_divergence_after_an_untyped_value_is_found(tmp_path, monkeypatch):
    """The Scaler's output has no inferred type; the search for the first differing node must still
    run the original with it as an output."""
    monkeypatch.setattr(api, "DEFAULT_PASSES", (*DEFAULT_PASSES, _scale_the_scaler))
    report = tmp_path / "report.json"
    with pytest.raises(VerificationError):
        converter.convert(_scaled_classifier(), tmp_path / "m.lite", report_path=report)
    divergence = json.loads(report.read_text())["verification"]["divergence"]
    assert divergence.get("op_type") == "Scaler" and divergence.get("tensor") == "scaled", divergence


def test_a_graph_importing_only_the_ml_domain_takes_fp16_inputs(tmp_path):
    # onnxmltools' XGBoost export imports ai.onnx.ml alone: --fp16-io's Casts had no version of
    # the default domain, and the converter refused its own nodes.
    regressor = helper.make_node("LinearRegressor", ["X"], ["Y"], domain="ai.onnx.ml", coefficients=[1.0, 2.0],
                                 intercepts=[0.5])
    graph = helper.make_graph([regressor], "ml_only", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    converter.convert(model, tmp_path / "m.lite", fp16_io=True)
    out = lite.Model.load(tmp_path / "m.lite", device="numpy").predict({"X": np.array([[1.0, 1.0]], np.float16)})
    assert out["Y"].dtype == np.float16 and out["Y"].tolist() == [[3.5]]


def _forest_regressor_declared_double() -> onnx.ModelProto:
    """skl2onnx's forest for ``DoubleTensorType`` inputs at ai.onnx.ml 3: double in, the output
    declared double, though the operator's schema makes it float (ONNX Runtime refuses to load it)."""
    proto = _forest_regressor()
    proto.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    proto.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    proto.graph.node.append(helper.make_node("Neg", ["variable"], ["negated"]))  # a reader of the output too
    proto.graph.output.append(helper.make_tensor_value_info("negated", TensorProto.FLOAT, [None, 1]))
    return proto


@pytest.mark.parametrize("value_info", [False, True], ids=["", "with-value-info"])
@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_an_output_declared_double_that_its_node_makes_float_keeps_its_declared_type(tmp_path, device, value_info):
    original = _forest_regressor_declared_double()
    if value_info:  # the output declared double in value_info too: the node's renamed result is float
        original.graph.value_info.append(helper.make_tensor_value_info("variable", TensorProto.DOUBLE, [None, 1]))
    before = original.SerializeToString()
    report = converter.convert(original, tmp_path / "m.lite")
    assert original.SerializeToString() == before
    assert report.verification.passed, report.verification.to_dict()
    assert any("'variable' is declared double, but its TreeEnsembleRegressor node computes float" in warning
               for warning in report.warnings)
    model = lite.Model.load(tmp_path / "m.lite", device=device)
    assert [spec.dtype for spec in model.outputs] == [np.float64, np.float32]
    x = np.array([[0.0, 0.5, -1.0], [0.0, -0.5, 1.0]])
    got = model.predict({"X": x})
    assert got["variable"].dtype == np.float64 and got["negated"].dtype == np.float32
    np.testing.assert_array_equal(got["variable"], [[8.0], [7.0]])  # leaves (20 - 4) / 2, (10 + 4) / 2
    np.testing.assert_array_equal(got["negated"], [[-8.0], [-7.0]])


def _dict_vectorized_classifier() -> onnx.ModelProto:
    """skl2onnx's DictVectorizer -> LogisticRegression: one sample's features as a string->float map."""
    vectorizer = helper.make_node("DictVectorizer", ["feats"], ["variable"], domain="ai.onnx.ml",
                                  string_vocabulary=["a", "b", "c"])
    linear = helper.make_node(
        "LinearClassifier", ["variable"], ["label", "probabilities"], domain="ai.onnx.ml", classlabels_ints=[0, 1],
        coefficients=[0.5, -1.0, 0.25, -0.5, 1.0, -0.25], intercepts=[0.1, -0.1], post_transform="LOGISTIC",
    )
    map_type = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, [1]))
    graph = helper.make_graph(
        [vectorizer, linear], "sklearn_like", [helper.make_value_info("feats", map_type)],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2])],
    )
    return helper.make_model(graph, opset_imports=_OPSETS)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_map_input_read_by_a_dict_vectorizer_becomes_the_tensor_it_makes(tmp_path, device):
    import onnxruntime

    original = _dict_vectorized_classifier()
    report = converter.convert(original, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    assert any("'feats' was a map read by DictVectorizer" in warning and "['a', 'b', 'c']" in warning
               for warning in report.warnings)
    model = lite.Model.load(tmp_path / "m.lite", device=device)
    keys = json.loads(model.metadata["feature_names"])["feats"]
    assert keys == ["a", "b", "c"] and model.inputs[0].shape == ("N", 3)
    session = onnxruntime.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    samples = [{"a": 1.0, "c": 2.0}, {"b": 3.0}]
    got = model.predict({"feats": np.array([[s.get(k, 0.0) for k in keys] for s in samples], np.float32)})
    for row, sample in enumerate(samples):
        label, probabilities = session.run(None, {"feats": sample})
        assert got["label"][row] == label[0]
        np.testing.assert_allclose(got["probabilities"][row], probabilities[0], rtol=1e-5, atol=1e-7)
