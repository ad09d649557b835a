"""TreeEnsemble (ai.onnx.ml): sum (or average, min, max) the leaves that each sample reaches.

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsemble.html

Interior nodes are the parallel ``nodes_*`` lists: sample ``x`` goes to the true branch when
``x[feature] <mode> split`` holds (modes 0..6: <=, <, >=, >, ==, !=, member of a set), or when
the feature is NaN and ``nodes_missing_value_tracks_true`` is set. A branch is a leaf index when
``nodes_trueleafs``/``nodes_falseleafs`` says so, else a node index. A root whose two branches
are the same leaf is a one-leaf tree. Leaf ``l`` adds ``leaf_weights[l]`` to target
``leaf_targetids[l]``; ``aggregate_function`` is 0 AVERAGE, 1 SUM, 2 MIN, 3 MAX (a target no
leaf reaches keeps the neutral start: 0, or the type's max/min). ``post_transform`` 0 NONE,
1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO; 4 PROBIT is not supported. The sets of the member nodes
are ``membership_values`` split at NaNs, in node order.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.registry import kernel

_MEMBER = 6
_AVERAGE, _SUM, _MIN, _MAX = 0, 1, 2, 3


def _member_sets(modes: np.ndarray, membership_values) -> dict[int, np.ndarray]:
    members = [] if membership_values is None else np.asarray(membership_values, dtype=np.float64).reshape(-1)
    groups, current = [], []
    for value in members:
        if np.isnan(value):
            groups.append(np.array(current))
            current = []
        else:
            current.append(value)
    member_nodes = np.flatnonzero(modes == _MEMBER)
    if len(groups) != len(member_nodes):
        raise KernelError(
            f"TreeEnsemble: {len(member_nodes)} set-membership nodes but {len(groups)} NaN-delimited sets"
        )
    return dict(zip(member_nodes.tolist(), groups))


def _goes_true(values: np.ndarray, mode: int, split: float, members: np.ndarray | None) -> np.ndarray:
    if mode == 0:
        return values <= split
    if mode == 1:
        return values < split
    if mode == 2:
        return values >= split
    if mode == 3:
        return values > split
    if mode == 4:
        return values == split
    if mode == 5:
        return values != split
    if mode == _MEMBER:
        return np.isin(values, members)
    raise KernelError(f"TreeEnsemble: unknown node mode {mode}")


def _reached_leaves(X: np.ndarray, root: int, nodes: dict, members: dict[int, np.ndarray]) -> np.ndarray:
    """The leaf index each row of X reaches in the tree at ``root``."""
    if (nodes["trueleafs"][root] and nodes["falseleafs"][root]
            and nodes["truenodeids"][root] == nodes["falsenodeids"][root]):
        return np.full(X.shape[0], nodes["truenodeids"][root], dtype=np.int64)
    leaves = np.empty(X.shape[0], dtype=np.int64)
    # Rows travel together, grouped by the interior node they are at.
    pending = [(root, np.arange(X.shape[0]))]
    while pending:
        node, rows = pending.pop()
        values = X[rows, nodes["featureids"][node]]
        chosen = _goes_true(values, int(nodes["modes"][node]), nodes["splits"][node], members.get(node))
        if nodes["missing_tracks_true"][node]:
            chosen = chosen | np.isnan(values)
        for branch, subset in (("true", rows[chosen]), ("false", rows[~chosen])):
            target = int(nodes[f"{branch}nodeids"][node])
            if not subset.size:
                continue
            if nodes[f"{branch}leafs"][node]:
                leaves[subset] = target
            else:
                pending.append((target, subset))
    return leaves


def _post_transform(scores: np.ndarray, post_transform: int) -> np.ndarray:
    if post_transform == 0:
        return scores
    if post_transform == 2:
        return 1 / (1 + np.exp(-scores))
    if post_transform in (1, 3):
        keep = np.ones_like(scores, dtype=bool) if post_transform == 1 else scores != 0
        shifted = np.where(keep, scores, -np.inf)
        exponent = np.where(keep, np.exp(shifted - np.max(shifted, axis=1, keepdims=True)), 0)
        total = np.sum(exponent, axis=1, keepdims=True)
        return exponent / np.where(total == 0, 1, total)
    raise UnsupportedOpError(f"TreeEnsemble: post_transform {post_transform} is not supported (0, 1, 2 or 3)")


@kernel("TreeEnsemble", since=5, domain="ai.onnx.ml")
def TreeEnsemble(X, *, aggregate_function=1, leaf_targetids, leaf_weights, membership_values=None, n_targets,
                 nodes_falseleafs, nodes_falsenodeids, nodes_featureids, nodes_hitrates=None,
                 nodes_missing_value_tracks_true=None, nodes_modes, nodes_splits, nodes_trueleafs,
                 nodes_truenodeids, post_transform=0, tree_roots):
    X = np.asarray(X)
    if X.ndim != 2:
        raise KernelError(f"TreeEnsemble: X must be [N, F], got shape {X.shape}")
    modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    nodes = {
        "modes": modes,
        "splits": np.asarray(nodes_splits, dtype=np.float64).reshape(-1),
        "featureids": list(nodes_featureids),
        "truenodeids": list(nodes_truenodeids),
        "falsenodeids": list(nodes_falsenodeids),
        "trueleafs": list(nodes_trueleafs),
        "falseleafs": list(nodes_falseleafs),
        "missing_tracks_true": list(nodes_missing_value_tracks_true or [0] * modes.shape[0]),
    }
    members = _member_sets(modes, membership_values)
    weights = np.asarray(leaf_weights, dtype=np.float64).reshape(-1)
    targets = np.asarray(leaf_targetids, dtype=np.int64)
    values = X.astype(np.float64)
    if aggregate_function in (_AVERAGE, _SUM):
        scores = np.zeros((X.shape[0], n_targets))
    elif aggregate_function in (_MIN, _MAX):
        limits = np.finfo(X.dtype)
        scores = np.full((X.shape[0], n_targets), limits.max if aggregate_function == _MIN else limits.min,
                         dtype=np.float64)
    else:
        raise KernelError(f"TreeEnsemble: aggregate_function must be 0..3, got {aggregate_function}")
    rows = np.arange(X.shape[0])
    for root in tree_roots:
        leaves = _reached_leaves(values, int(root), nodes, members)
        if aggregate_function in (_AVERAGE, _SUM):
            np.add.at(scores, (rows, targets[leaves]), weights[leaves])
        elif aggregate_function == _MIN:
            np.minimum.at(scores, (rows, targets[leaves]), weights[leaves])
        else:
            np.maximum.at(scores, (rows, targets[leaves]), weights[leaves])
    if aggregate_function == _AVERAGE:
        scores /= len(tree_roots)
    return _post_transform(scores, post_transform).astype(X.dtype)
