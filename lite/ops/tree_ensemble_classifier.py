"""TreeEnsembleClassifier (ai.onnx.ml, opsets 1-3): the legacy form of TreeEnsemble for classes.

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleClassifier.html. Z [N, classes] sums the
leaves' ``class_weights`` across trees, plus ``base_values``, then ``post_transform``; Y is the
label of each row's largest score. The trees are :mod:`lite.ops._tree_ensemble_legacy`'s,
flattened once when the engine loads the node (:func:`prepare_classifier`).

A binary classifier whose leaves weigh the first class only (``class_ids`` all 0; skl2onnx writes
scikit-learn's binary forests and boosters so) scores the positive class: Y is the second label
where that score passes 0.5 (all weights non-negative: a probability) or 0 (a margin), and Z gets
two columns, as ONNX Runtime writes them: ``[1 - s, s]`` for a probability, ``[-s, s]`` for a
margin, ``[logistic(-s), logistic(s)]`` for a margin with LOGISTIC. Two labels with both classes
scored are read as any other classifier (the best score wins); ONNX Runtime reads them otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import class_labels, features, logistic, text, transform_scores
from lite.ops._tree_ensemble_legacy import Forest, prepare_forest
from lite.ops.registry import kernel


@dataclass(frozen=True)
class PreparedClassifier:
    """A TreeEnsembleClassifier node's trees ready to walk, and what the binary cases read off its
    class weights."""

    forest: Forest
    scored: list[int]  # the class ids the leaves weigh, sorted
    nonnegative: bool  # every class weight >= 0: the scores are probabilities


def prepare_classifier(constants, shapes, *, class_ids=None, class_nodeids=None, class_treeids=None,
                       class_weights=None, class_weights_as_tensor=None, classlabels_int64s=None,
                       classlabels_strings=None, nodes_falsenodeids=None, nodes_featureids=None,
                       nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                       nodes_truenodeids=None, nodes_values=None, nodes_values_as_tensor=None,
                       **_) -> PreparedClassifier:
    """The load-time work of a TreeEnsembleClassifier node (the ``prepare`` hook of
    lite.ops.registry): its trees flattened and its class weights tabled."""
    op = "TreeEnsembleClassifier"
    weights = class_weights_as_tensor if class_weights_as_tensor is not None else class_weights
    weights = np.asarray(weights if weights is not None else [], dtype=np.float64).reshape(-1)
    forest = prepare_forest(
        op, class_labels(classlabels_int64s, classlabels_strings, op).shape[0], class_ids, class_treeids,
        class_nodeids, weights, nodes_falsenodeids=nodes_falsenodeids, nodes_featureids=nodes_featureids,
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, nodes_modes=nodes_modes,
        nodes_nodeids=nodes_nodeids, nodes_treeids=nodes_treeids, nodes_truenodeids=nodes_truenodeids,
        nodes_values=nodes_values, nodes_values_as_tensor=nodes_values_as_tensor)
    scored = np.unique(np.asarray(class_ids if class_ids is not None else [], dtype=np.int64)).tolist()
    return PreparedClassifier(forest, scored, bool(np.all(weights >= 0)))


@kernel("TreeEnsembleClassifier", since=1, domain="ai.onnx.ml", prepare=prepare_classifier)
def TreeEnsembleClassifier(X, *, base_values=None, base_values_as_tensor=None, class_ids=None, class_nodeids=None,
                           class_treeids=None, class_weights=None, class_weights_as_tensor=None,
                           classlabels_int64s=None, classlabels_strings=None, nodes_falsenodeids=None,
                           nodes_featureids=None, nodes_hitrates=None, nodes_hitrates_as_tensor=None,
                           nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                           nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                           nodes_values_as_tensor=None, post_transform="NONE", prepared=None):
    op = "TreeEnsembleClassifier"
    X = features(X, op)
    labels = class_labels(classlabels_int64s, classlabels_strings, op)
    if prepared is None:
        prepared = prepare_classifier(
            [X], [X.shape], class_ids=class_ids, class_nodeids=class_nodeids, class_treeids=class_treeids,
            class_weights=class_weights, class_weights_as_tensor=class_weights_as_tensor,
            classlabels_int64s=classlabels_int64s, classlabels_strings=classlabels_strings,
            nodes_falsenodeids=nodes_falsenodeids, nodes_featureids=nodes_featureids,
            nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, nodes_modes=nodes_modes,
            nodes_nodeids=nodes_nodeids, nodes_treeids=nodes_treeids, nodes_truenodeids=nodes_truenodeids,
            nodes_values=nodes_values, nodes_values_as_tensor=nodes_values_as_tensor)
    scores, _ = prepared.forest.aggregate(op, X, "SUM")
    base = base_values_as_tensor if base_values_as_tensor is not None else base_values
    base = np.asarray(base if base is not None else [], dtype=np.float64).reshape(-1)
    transform = text(post_transform)
    if labels.shape[0] == 2 and prepared.scored == [0]:
        return _binary(scores[:, 0] + (base[0] if base.size else 0.0), labels, prepared.nonnegative, transform)
    if labels.shape[0] == 2 and prepared.scored == [1] and not base.size:
        # Only the second class scored: ONNX Runtime keeps both columns (the first stays 0) and
        # picks the label as for one scored class.
        positive = scores[:, 1] > (0.5 if prepared.nonnegative else 0)
        return labels[positive.astype(np.int64)], transform_scores(scores, transform, op).astype(np.float32)
    if base.size not in (0, labels.shape[0]):
        raise KernelError(f"{op}: {base.size} base_values for {labels.shape[0]} classes")
    if base.size:
        scores = scores + base
    scores = transform_scores(scores, transform, op)
    return labels[np.argmax(scores, axis=1)], scores.astype(np.float32)


def _binary(score: np.ndarray, labels: np.ndarray, probability: bool, transform: str) -> tuple[np.ndarray, np.ndarray]:
    positive = score > 0.5 if probability else score > 0
    if probability:
        columns = [1 - score, score]
    elif transform == "LOGISTIC":
        columns = [logistic(-score), logistic(score)]
    else:
        columns = [-score, score]
    return labels[positive.astype(np.int64)], np.stack(columns, axis=1).astype(np.float32)
