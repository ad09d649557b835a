"""TreeEnsembleRegressor (ai.onnx.ml, opsets 1-3): the legacy form of TreeEnsemble for regression.

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleRegressor.html. Y [N, n_targets] is the
leaves' ``target_weights`` aggregated across trees, plus ``base_values``, then ``post_transform``
(a target that none of a sample's leaves names is 0 for that sample, as in ONNX Runtime);
the tree walk is :mod:`lite.ops._tree_ensemble_legacy`. skl2onnx writes it for scikit-learn's
tree, forest and gradient-boosting regressors.
"""

from __future__ import annotations

import numpy as np

from lite.ops._ml_common import features, transform_scores
from lite.ops._tree_ensemble_legacy import aggregate, build_forest, leaf_weights, reached_leaves
from lite.ops.registry import kernel


@kernel("TreeEnsembleRegressor", since=1, domain="ai.onnx.ml")
def TreeEnsembleRegressor(X, *, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                          n_targets=1, nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                          nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                          nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                          nodes_values_as_tensor=None, post_transform="NONE", target_ids=None, target_nodeids=None,
                          target_treeids=None, target_weights=None, target_weights_as_tensor=None):
    op = "TreeEnsembleRegressor"
    X = features(X, op)
    values = nodes_values_as_tensor if nodes_values_as_tensor is not None else nodes_values
    forest = build_forest(op, nodes_treeids, nodes_nodeids, nodes_featureids, nodes_modes, values,
                          nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true)
    weights = target_weights_as_tensor if target_weights_as_tensor is not None else target_weights
    table, named = leaf_weights(op, forest, n_targets, target_treeids, target_nodeids, target_ids,
                                np.asarray(weights if weights is not None else [], dtype=np.float64).reshape(-1))
    scores, reached = aggregate(op, forest, reached_leaves(forest, X), table, named, aggregate_function)
    base = base_values_as_tensor if base_values_as_tensor is not None else base_values
    if base is not None and len(np.asarray(base).reshape(-1)):
        scores = scores + np.asarray(base, dtype=np.float64).reshape(-1)
    # A target no reached leaf names is 0, base value and all (ONNX Runtime's reading).
    scores = np.where(reached, scores, 0.0)
    return transform_scores(scores, post_transform, op).astype(np.float32)
