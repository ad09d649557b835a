"""The tree ensemble kernels (TreeEnsemble, TreeEnsembleRegressor, TreeEnsembleClassifier) on
generated forests against ONNX Runtime, prepared (as the engine loads them) and unprepared.

The forests (tests/lite/ops/_random_forests.py) mix trees of different depths, every branch
mode, NaN tracked to either side and several targets. ONNX Runtime is the reference for the
walk; where it departs from the spec the tests keep to what both agree on: TreeEnsemble's
SOFTMAX and LOGISTIC (ONNX Runtime reads the two codes the other way round, or skips LOGISTIC
for one target), and MIN/MAX of a target no reached leaf names (ONNX Runtime gives 0, the spec
the type's extreme), so the MIN/MAX forests give every target a one-leaf tree.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import converter
import lite
from lite.errors import KernelError
from lite.ops import _tree_walk
from lite.ops.tree_ensemble import TreeEnsemble, prepare_tree_ensemble
from lite.ops.tree_ensemble_classifier import TreeEnsembleClassifier, prepare_classifier
from lite.ops.tree_ensemble_regressor import TreeEnsembleRegressor, prepare_regressor
from tests.lite.ops._checks_core import read_only
from tests.lite.ops._random_forests import (
    Leaf,
    features,
    legacy_attributes,
    random_trees,
    tree_ensemble_attributes,
)

onnxruntime = pytest.importorskip("onnxruntime")

ML = "ai.onnx.ml"
DEPTHS = [0, 1, 3, 6, 4, 2]
ALL_MODES = list(range(7))


def onnx_model(op_type: str, attributes: dict, x: np.ndarray, output_count: int, ml_opset: int):
    proto_attributes = {name: numpy_helper.from_array(value) if isinstance(value, np.ndarray) else value
                        for name, value in attributes.items()}
    outputs = [f"out{i}" for i in range(output_count)]
    node = helper.make_node(op_type, ["X"], outputs, domain=ML, **proto_attributes)
    graph = helper.make_graph(
        [node], "forest", [helper.make_tensor_value_info("X", helper.np_dtype_to_tensor_dtype(x.dtype), [None, x.shape[1]])],
        [helper.make_value_info(name, helper.make_empty_tensor_value_info(name).type) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 10
    return model


def onnx_runtime(op_type: str, attributes: dict, x: np.ndarray, output_count: int, ml_opset: int) -> list:
    model = onnx_model(op_type, attributes, x, output_count, ml_opset)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})


def assert_prepared_and_unprepared_match(kernel, prepare, x: np.ndarray, attributes: dict, expected: list) -> None:
    """Both calls give ``expected`` (ONNX Runtime's outputs), and each other's bits."""
    unprepared = kernel(read_only(x), **attributes)
    prepared = kernel(read_only(x), prepared=prepare([None], [x.shape], **attributes), **attributes)
    unprepared, prepared = (list(result) if isinstance(result, tuple) else [result] for result in (unprepared, prepared))
    for index, (got, again, want) in enumerate(zip(unprepared, prepared, expected)):
        assert got.dtype == again.dtype and np.array_equal(got, again), f"output {index}: prepared differs"
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got, want, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"output {index}")


def with_every_target(trees: list, targets: int) -> list:
    """The trees plus a one-leaf tree per target: every sample reaches every target."""
    return trees + [Leaf({target: 0.5 * target - 0.25}) for target in range(targets)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("aggregate_function", [0, 1, 2, 3])
@pytest.mark.parametrize("post_transform", [0, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_ensemble_matches_onnx_runtime(dtype, aggregate_function, post_transform, seed):
    rng = np.random.default_rng(seed)
    trees = with_every_target(random_trees(rng, DEPTHS, 5, 3, ALL_MODES), 3)
    attributes = tree_ensemble_attributes(trees, 3, dtype, aggregate_function=aggregate_function,
                                          post_transform=post_transform)
    x = features(rng, 40, 5, dtype)
    expected = onnx_runtime("TreeEnsemble", attributes, x, 1, 5)
    assert_prepared_and_unprepared_match(TreeEnsemble, prepare_tree_ensemble, x, attributes, expected)


@pytest.mark.parametrize("modes", [[0], [2], [4], [5], [6], ALL_MODES], ids=lambda modes: "-".join(map(str, modes)))
def test_tree_ensemble_one_branch_mode_throughout(modes):
    rng = np.random.default_rng(7)
    attributes = tree_ensemble_attributes(random_trees(rng, DEPTHS, 4, 2, modes), 2, np.float64)
    x = features(rng, 60, 4, np.float64)
    expected = onnx_runtime("TreeEnsemble", attributes, x, 1, 5)
    assert_prepared_and_unprepared_match(TreeEnsemble, prepare_tree_ensemble, x, attributes, expected)


@pytest.mark.parametrize("aggregate_function", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_regressor_matches_onnx_runtime(aggregate_function, targets, dtype):
    rng = np.random.default_rng(targets)
    trees = random_trees(rng, DEPTHS, 5, targets, ALL_MODES[:6], targets_per_leaf=targets)
    attributes = legacy_attributes(trees, "target", n_targets=targets, aggregate_function=aggregate_function,
                                   base_values=[0.5, -1.0, 0.25][:targets])
    x = features(rng, 40, 5, dtype)
    expected = onnx_runtime("TreeEnsembleRegressor", attributes, x, 1, 3)
    assert_prepared_and_unprepared_match(TreeEnsembleRegressor, prepare_regressor, x, attributes, expected)


@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("classes", [3, 4])
def test_tree_ensemble_classifier_matches_onnx_runtime(post_transform, classes):
    rng = np.random.default_rng(classes)
    trees = random_trees(rng, DEPTHS, 5, classes, ALL_MODES[:6], targets_per_leaf=2)
    attributes = legacy_attributes(trees, "class", classlabels_int64s=list(range(10, 10 + classes)),
                                   post_transform=post_transform, base_values=list(rng.normal(size=classes)))
    x = features(rng, 40, 5, np.float32)
    expected = onnx_runtime("TreeEnsembleClassifier", attributes, x, 2, 3)
    assert_prepared_and_unprepared_match(TreeEnsembleClassifier, prepare_classifier, x, attributes, expected)


def test_many_samples_walk_in_slices(monkeypatch):
    rng = np.random.default_rng(3)
    attributes = tree_ensemble_attributes(random_trees(rng, DEPTHS, 5, 2, ALL_MODES), 2, np.float64)
    x = features(rng, 50, 5, np.float64)
    whole = TreeEnsemble(x, **attributes)
    monkeypatch.setattr(_tree_walk, "_SLICE_PAIRS", 16)  # a few samples a slice
    np.testing.assert_array_equal(TreeEnsemble(x, **attributes), whole)
    np.testing.assert_allclose(whole, onnx_runtime("TreeEnsemble", attributes, x, 1, 5)[0], rtol=1e-12)


def test_the_engine_runs_a_converted_forest_as_onnx_runtime_does(tmp_path):
    rng = np.random.default_rng(11)
    attributes = tree_ensemble_attributes(random_trees(rng, DEPTHS, 5, 3, ALL_MODES), 3, np.float64)
    x = features(rng, 64, 5, np.float64)
    model = onnx_model("TreeEnsemble", attributes, x, 1, 5)
    converter.convert(model, tmp_path / "forest.lite")
    loaded = lite.Model.load(tmp_path / "forest.lite", device="numpy")
    for rows in (x[:1], x):
        (got,) = loaded.predict({"X": rows}).values()
        np.testing.assert_allclose(got, onnx_runtime("TreeEnsemble", attributes, rows, 1, 5)[0], rtol=1e-12)


def test_a_cycle_is_reported():
    attributes = tree_ensemble_attributes(random_trees(np.random.default_rng(0), [2], 2, 1, [0]), 1)
    attributes["nodes_truenodeids"][1] = 0  # node 1 leads back to the root
    attributes["nodes_trueleafs"][1] = 0
    with pytest.raises(KernelError, match="cycle"):
        TreeEnsemble(np.zeros((2, 2), np.float32), **attributes)


def test_a_branch_to_a_missing_node_is_reported():
    attributes = tree_ensemble_attributes(random_trees(np.random.default_rng(0), [2], 2, 1, [0]), 1)
    attributes["nodes_falsenodeids"][0] = 99
    with pytest.raises(KernelError, match="leads to node 99"):
        TreeEnsemble(np.zeros((2, 2), np.float32), **attributes)


def test_too_few_features_are_reported():
    attributes = tree_ensemble_attributes(random_trees(np.random.default_rng(0), [3], 4, 1, [0]), 1)
    with pytest.raises(KernelError, match="X has 1 columns"):
        TreeEnsemble(np.zeros((2, 1), np.float32), **attributes)


def test_node_lists_of_different_lengths_are_reported():
    attributes = tree_ensemble_attributes(random_trees(np.random.default_rng(0), [2, 3], 2, 1, [0]), 1)
    attributes["nodes_falseleafs"] = attributes["nodes_falseleafs"][:-2]
    with pytest.raises(KernelError, match="nodes_falseleafs has"):
        TreeEnsemble(np.zeros((2, 2), np.float32), **attributes)


def test_a_legacy_branch_to_a_missing_node_is_reported():
    attributes = legacy_attributes(random_trees(np.random.default_rng(0), [2], 2, 1, [0]), "target")
    attributes["nodes_truenodeids"][0] = 42
    with pytest.raises(KernelError, match="branches to missing node 42"):
        TreeEnsembleRegressor(np.zeros((2, 2), np.float32), **attributes)
