"""TreeEnsembleRegressor (ai.onnx.ml, opsets 1-3): the legacy form of TreeEnsemble for regression.

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleRegressor.html. Y [N, n_targets] is the
leaves' ``target_weights`` aggregated across trees, plus ``base_values``, then ``post_transform``
(a target that none of a sample's leaves names is 0 for that sample, as in ONNX Runtime);
the trees are :mod:`lite.ops._tree_ensemble_legacy`'s, flattened once when the engine loads the
node (:func:`prepare_regressor`). skl2onnx writes it for scikit-learn's
tree, forest and gradient-boosting regressors.
"""

from __future__ import annotations

import numpy as np

from lite.ops._ml_common import features, transform_scores
from lite.ops._tree_ensemble_legacy import Forest, prepare_forest
from lite.ops.registry import kernel


def prepare_regressor(constants, shapes, *, n_targets=1, target_ids=None, target_nodeids=None, target_treeids=None,
                      target_weights=None, target_weights_as_tensor=None, nodes_falsenodeids=None,
                      nodes_featureids=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                      nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                      nodes_values_as_tensor=None, **_) -> Forest:
    """The load-time work of a TreeEnsembleRegressor node (the ``prepare`` hook of
    lite.ops.registry): its trees flattened and its target weights tabled."""
    weights = target_weights_as_tensor if target_weights_as_tensor is not None else target_weights
    return prepare_forest(
        "TreeEnsembleRegressor", n_targets, target_ids, target_treeids, target_nodeids, weights,
        nodes_falsenodeids=nodes_falsenodeids, nodes_featureids=nodes_featureids,
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, nodes_modes=nodes_modes,
        nodes_nodeids=nodes_nodeids, nodes_treeids=nodes_treeids, nodes_truenodeids=nodes_truenodeids,
        nodes_values=nodes_values, nodes_values_as_tensor=nodes_values_as_tensor)


@kernel("TreeEnsembleRegressor", since=1, domain="ai.onnx.ml", prepare=prepare_regressor)
def TreeEnsembleRegressor(X, *, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                          n_targets=1, nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                          nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                          nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                          nodes_values_as_tensor=None, post_transform="NONE", target_ids=None, target_nodeids=None,
                          target_treeids=None, target_weights=None, target_weights_as_tensor=None, prepared=None):
    op = "TreeEnsembleRegressor"
    X = features(X, op)
    if prepared is None:
        prepared = prepare_regressor(
            [X], [X.shape], n_targets=n_targets, target_ids=target_ids, target_nodeids=target_nodeids,
            target_treeids=target_treeids, target_weights=target_weights,
            target_weights_as_tensor=target_weights_as_tensor, nodes_falsenodeids=nodes_falsenodeids,
            nodes_featureids=nodes_featureids, nodes_missing_value_tracks_true=nodes_missing_value_tracks_true,
            nodes_modes=nodes_modes, nodes_nodeids=nodes_nodeids, nodes_treeids=nodes_treeids,
            nodes_truenodeids=nodes_truenodeids, nodes_values=nodes_values, nodes_values_as_tensor=nodes_values_as_tensor)
    scores, reached = prepared.aggregate(op, X, aggregate_function)
    base = base_values_as_tensor if base_values_as_tensor is not None else base_values
    if base is not None and len(np.asarray(base).reshape(-1)):
        scores = scores + np.asarray(base, dtype=np.float64).reshape(-1)
    # A target no reached leaf names is 0, base value and all (ONNX Runtime's reading).
    scores = np.where(reached, scores, 0.0)
    return transform_scores(scores, post_transform, op).astype(np.float32)
