"""The classic ai.onnx.ml predictors that skl2onnx writes for scikit-learn models, against ONNX
Runtime (the runtime those graphs are written for; onnx.reference differs on the binary cases)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from tests.lite.ops._checks_core import assert_matches
from tests.lite.ops._checks_domains import normal, run_kernel

onnxruntime = pytest.importorskip("onnxruntime")

ML = "ai.onnx.ml"


def check_ml(op_type: str, x: np.ndarray, attributes: dict[str, Any], output_count: int = 1) -> list[np.ndarray]:
    outputs = [f"out{i}" for i in range(output_count)]
    node = helper.make_node(op_type, ["x"], outputs, domain=ML, **attributes)
    graph = helper.make_graph(
        [node], "one_node", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_value_info(name, helper.make_empty_tensor_value_info(name).type) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})
    actual = run_kernel(op_type, [x], attributes, opset=3, output_count=output_count, domain=ML)
    for index, (got, want) in enumerate(zip(actual, expected)):
        if want.dtype == object:
            assert got.tolist() == want.tolist(), f"{op_type} output {index}"
        else:
            assert_matches(got, want, f"{op_type} output {index} {attributes}", 1e-5, 1e-6)
    return actual


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scaler(dtype):
    x = (normal(5, 3) * 4).astype(dtype)
    check_ml("Scaler", x, {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.5, -1.0]})
    check_ml("Scaler", x, {"offset": [1.5], "scale": [3.0]})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    x = normal(4, 5)
    x[1] = 0.0  # a zero row stays zero
    x[2] = -np.abs(x[2])  # MAX of an all-negative row
    check_ml("Normalizer", x, {"norm": norm})


@pytest.mark.parametrize("targets,transform", [(1, "NONE"), (3, "NONE"), (2, "LOGISTIC"), (3, "SOFTMAX")])
def test_linear_regressor(targets, transform):
    coefficients = normal(targets * 4).tolist()
    check_ml("LinearRegressor", normal(6, 4), {"coefficients": coefficients, "intercepts": normal(targets).tolist(),
                                              "targets": targets, "post_transform": transform})


@pytest.mark.parametrize("rows,transform", [
    (3, "NONE"), (3, "LOGISTIC"), (3, "SOFTMAX"), (3, "SOFTMAX_ZERO"),
    (2, "LOGISTIC"),  # scikit-learn's binary LogisticRegression: both classes' rows
    (1, "NONE"), (1, "LOGISTIC"),  # one row: the positive class's score
])
@pytest.mark.parametrize("strings", [False, True])
def test_linear_classifier(rows, transform, strings):
    classes = 3 if rows == 3 else 2
    labels = {"classlabels_strings": ["cat", "dog", "emu"][:classes]} if strings else {"classlabels_ints": [4, 7, 9][:classes]}
    attributes = {"coefficients": normal(rows * 5).tolist(), "intercepts": normal(rows).tolist(),
                  "post_transform": transform, **labels}
    check_ml("LinearClassifier", normal(8, 5), attributes, output_count=2)


def forest(**overrides) -> dict[str, Any]:
    """Two trees over 3 features: tree 0 splits twice (BRANCH_LEQ, then BRANCH_GT), tree 1 once
    (BRANCH_LT, NaN going true); node ids within a tree are not in attribute order."""
    attributes = {
        "nodes_treeids": [0, 0, 0, 0, 0, 1, 1, 1],
        "nodes_nodeids": [0, 2, 1, 3, 4, 0, 1, 2],
        "nodes_featureids": [0, 1, 0, 0, 0, 2, 0, 0],
        "nodes_modes": ["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_LT", "LEAF", "LEAF"],
        "nodes_values": [0.25, -0.5, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0],
        "nodes_truenodeids": [1, 3, 0, 0, 0, 1, 0, 0],
        "nodes_falsenodeids": [2, 4, 0, 0, 0, 2, 0, 0],
        "nodes_missing_value_tracks_true": [0, 0, 0, 0, 0, 1, 0, 0],
    }
    attributes.update(overrides)
    return attributes


def features() -> np.ndarray:
    # Fixed values, whatever ran before: rows whose class scores tie up to rounding (a base value
    # of 0.1 against -0.2 + 0.6 - 0.3) take the first class here and, summed in float32, the last
    # in ONNX Runtime; with the module's shared generator, the rows drawn depended on test order.
    x = np.random.default_rng(5).standard_normal((12, 3)).astype(np.float32)
    x[0, 2] = np.nan
    x[1, 0] = 0.25  # on the threshold: BRANCH_LEQ goes true
    return x


LEAVES = {"treeids": [0, 0, 0, 1, 1], "nodeids": [1, 3, 4, 1, 2]}


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 2])
def test_tree_ensemble_regressor(aggregate, targets):
    ids = [0, 0, 0, 0, 0] if targets == 1 else [0, 1, 1, 0, 1]
    attributes = forest(n_targets=targets, aggregate_function=aggregate, base_values=[0.5, -1.0][:targets],
                        target_treeids=LEAVES["treeids"], target_nodeids=LEAVES["nodeids"], target_ids=ids,
                        target_weights=[1.0, -2.0, 3.5, 0.25, 4.0])
    check_ml("TreeEnsembleRegressor", features(), attributes)


def classifier(weights: list[float], ids: list[int], labels: int = 2, **overrides) -> dict[str, Any]:
    return forest(class_treeids=LEAVES["treeids"], class_nodeids=LEAVES["nodeids"], class_ids=ids,
                  class_weights=weights, classlabels_int64s=[3, 5, 8][:labels], **overrides)


@pytest.mark.parametrize("attributes", [
    # scikit-learn's binary forest: the positive class's probability, one class id
    classifier([0.9, 0.2, 0.6, 0.3, 0.8], [0] * 5),
    # binary gradient boosting: a margin with a base value, then LOGISTIC (or none)
    classifier([0.9, -0.2, 0.6, -0.3, 0.8], [0] * 5, base_values=[0.3], post_transform="LOGISTIC"),
    classifier([0.9, -0.2, 0.6, -0.3, 0.8], [0] * 5, base_values=[-0.1]),
    # three classes, probabilities (a forest) or margins with SOFTMAX (gradient boosting)
    classifier([0.9, 0.2, 0.6, 0.3, 0.8], [0, 1, 2, 2, 1], labels=3),
    classifier([0.9, -0.2, 0.6, -0.3, 0.8], [0, 1, 2, 2, 1], labels=3, base_values=[0.1, 0.0, -0.2],
               post_transform="SOFTMAX"),
], ids=["binary-probability", "binary-logistic", "binary-margin", "multiclass", "multiclass-softmax"])
def test_tree_ensemble_classifier(attributes):
    check_ml("TreeEnsembleClassifier", features(), attributes, output_count=2)


def test_tree_ensemble_classifier_string_labels():
    attributes = classifier([0.9, 0.2, 0.6, 0.3, 0.8], [0, 1, 2, 2, 1], labels=3)
    attributes["classlabels_strings"] = ["cat", "dog", "emu"]
    del attributes["classlabels_int64s"]
    check_ml("TreeEnsembleClassifier", features(), attributes, output_count=2)


def test_tree_ensemble_classifier_scoring_the_second_class_only():
    check_ml("TreeEnsembleClassifier", features(), classifier([0.9, 0.2, 0.6, 0.3, 0.8], [1] * 5), output_count=2)


@pytest.mark.parametrize("attributes,x", [
    ({"imputed_value_floats": [1.5, -2.0, 3.0], "replaced_value_float": float("nan")}, "nan"),
    ({"imputed_value_floats": [7.0], "replaced_value_float": 0.0}, "zeros"),
    ({"imputed_value_int64s": [5, 6, 7], "replaced_value_int64": -1}, "ints"),
])
def test_imputer(attributes, x):
    values = normal(5, 3)
    if x == "nan":
        values[::2, 1] = np.nan
    elif x == "zeros":
        values[1] = 0.0
    else:
        values = np.array([[-1, 2, 3], [4, -1, -1]], dtype=np.int64)
    check_ml("Imputer", values, attributes)


@pytest.mark.parametrize("x,attributes", [
    (np.array([[1, 4], [3, 9]], dtype=np.int64), {"cats_int64s": [1, 3, 4]}),
    (np.array([[1.0], [3.0], [2.0]], dtype=np.float32), {"cats_int64s": [1, 2, 3]}),
    (np.array([["a", "c"], ["b", "z"]], dtype=object), {"cats_strings": ["a", "b", "c"]}),
])
def test_one_hot_encoder(x, attributes):
    check_ml("OneHotEncoder", x, attributes)


KERNEL_PARAMS = {"LINEAR": [0.0, 0.0, 0.0], "POLY": [0.3, 1.0, 3.0], "RBF": [0.25, 0.0, 3.0], "SIGMOID": [0.1, 0.5, 0.0]}


def svm_classifier(kernel_type: str, per_class: list[int], probabilities: bool) -> dict[str, Any]:
    classes, vectors = len(per_class), sum(per_class)
    pairs = classes * (classes - 1) // 2
    attributes = {
        "classlabels_ints": [10 + c for c in range(classes)], "vectors_per_class": per_class,
        "support_vectors": normal(vectors * 4).tolist(), "coefficients": normal((classes - 1) * vectors).tolist(),
        "rho": normal(pairs).tolist(), "kernel_type": kernel_type, "kernel_params": KERNEL_PARAMS[kernel_type],
    }
    if probabilities:
        attributes["prob_a"] = (-1 - np.abs(normal(pairs))).tolist()
        attributes["prob_b"] = (normal(pairs) * 0.1).tolist()
    return attributes


@pytest.mark.parametrize("kernel_type", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("per_class", [[3, 2], [2, 3, 2], [2, 1, 2, 3]], ids=["2", "3", "4"])
@pytest.mark.parametrize("probabilities", [False, True], ids=["decisions", "probabilities"])
def test_svm_classifier(kernel_type, per_class, probabilities):
    check_ml("SVMClassifier", normal(10, 4), svm_classifier(kernel_type, per_class, probabilities), output_count=2)


@pytest.mark.parametrize("kernel_type", ["LINEAR", "RBF", "POLY"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel_type, one_class):
    attributes = {"n_supports": 5, "support_vectors": normal(5 * 4).tolist(), "coefficients": normal(5).tolist(),
                  "rho": [0.3], "kernel_type": kernel_type, "kernel_params": KERNEL_PARAMS[kernel_type],
                  "one_class": one_class}
    check_ml("SVMRegressor", normal(10, 4), attributes)


def test_linear_svm_regressor_without_support_vectors():
    check_ml("SVMRegressor", normal(10, 4), {"coefficients": normal(4).tolist(), "rho": [-0.5],
                                            "kernel_params": KERNEL_PARAMS["LINEAR"]})
