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

The attributes are flattened once (:func:`prepare_tree_ensemble`, the engine's load-time hook)
and every sample walks every tree together (:mod:`lite.ops._tree_walk`); the leaves' weights
are added in tree order, as a tree-by-tree loop adds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops._tree_walk import MEMBER, Branches, TreeWalk, build_walk
from lite.ops.registry import kernel

_AVERAGE, _SUM, _MIN, _MAX = 0, 1, 2, 3


@dataclass(frozen=True)
class PreparedTreeEnsemble:
    """A TreeEnsemble node's trees as flat arrays, and what each leaf adds to which target."""

    walk: TreeWalk
    leaf_targets: np.ndarray
    leaf_weights: np.ndarray


def prepare_tree_ensemble(constants, shapes, *, leaf_targetids, leaf_weights, membership_values=None, n_targets,
                          nodes_falseleafs, nodes_falsenodeids, nodes_featureids, nodes_missing_value_tracks_true=None,
                          nodes_modes, nodes_splits, nodes_trueleafs, nodes_truenodeids, tree_roots,
                          **_) -> PreparedTreeEnsemble:
    """The load-time work of a TreeEnsemble node (the ``prepare`` hook of lite.ops.registry):
    its attributes checked and flattened for :class:`lite.ops._tree_walk.TreeWalk`."""
    modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    unknown = np.flatnonzero((modes < 0) | (modes > MEMBER))
    if unknown.size:
        raise KernelError(f"TreeEnsemble: unknown node mode {int(modes[unknown[0]])} at node {int(unknown[0])} "
                          "(modes are 0..6)")
    count = modes.shape[0]
    weights = np.asarray(leaf_weights, dtype=np.float64).reshape(-1)
    targets = np.asarray(leaf_targetids, dtype=np.int64).reshape(-1)
    if targets.shape != weights.shape or np.any((targets < 0) | (targets >= n_targets)):
        raise KernelError(f"TreeEnsemble: {targets.shape[0]} leaf_targetids for {weights.shape[0]} leaf_weights, "
                          f"each must be in [0, n_targets={n_targets})")
    true_branches = Branches(np.asarray(nodes_truenodeids), np.asarray(nodes_trueleafs))
    false_branches = Branches(np.asarray(nodes_falsenodeids), np.asarray(nodes_falseleafs))
    walk = build_walk(
        "TreeEnsemble", np.asarray(nodes_featureids, dtype=np.int64), np.asarray(nodes_splits, dtype=np.float64).reshape(-1),
        modes, true_branches, false_branches,
        np.asarray(nodes_missing_value_tracks_true if nodes_missing_value_tracks_true is not None else np.zeros(count)),
        _roots(np.asarray(tree_roots, dtype=np.int64), true_branches, false_branches), weights.shape[0],
        (np.flatnonzero(modes == MEMBER), _member_groups(modes, membership_values)),
    )
    return PreparedTreeEnsemble(walk, targets, weights)


def _roots(roots: np.ndarray, true_branches: Branches, false_branches: Branches) -> Branches:
    """Each tree's start: its root node, or the leaf of a one-leaf tree (a root whose two branches
    are the same leaf)."""
    # The shortest branch list bounds the roots here; build_walk reports lists of unequal length.
    nodes = min(len(values) for branches in (true_branches, false_branches)
                for values in (branches.targets, branches.is_leaf))
    if np.any(roots < 0) or np.any(roots >= nodes):
        raise KernelError(f"TreeEnsemble: tree_roots {roots.tolist()[:8]} name nodes outside the {nodes} nodes")
    one_leaf = (true_branches.is_leaf[roots].astype(bool) & false_branches.is_leaf[roots].astype(bool)
                & (true_branches.targets[roots] == false_branches.targets[roots]))
    return Branches(np.where(one_leaf, true_branches.targets[roots], roots), one_leaf)


def _member_groups(modes: np.ndarray, membership_values) -> list[np.ndarray]:
    """The sets of the member nodes: ``membership_values`` split at its NaNs."""
    members = np.zeros(0) if membership_values is None else np.asarray(membership_values, dtype=np.float64).reshape(-1)
    ends = np.flatnonzero(np.isnan(members))
    starts = np.concatenate([[0], ends[:-1] + 1])
    groups = [members[start:end] for start, end in zip(starts, ends)]
    member_count = int(np.count_nonzero(modes == MEMBER))
    if len(groups) != member_count:
        raise KernelError(f"TreeEnsemble: {member_count} set-membership nodes but {len(groups)} NaN-delimited sets")
    return groups


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


def _start(aggregate_function: int, dtype: np.dtype) -> float:
    """What a target's score starts from: 0 for SUM and AVERAGE, the type's max (MIN) or min (MAX)."""
    if aggregate_function in (_AVERAGE, _SUM):
        return 0.0
    if aggregate_function not in (_MIN, _MAX):
        raise KernelError(f"TreeEnsemble: aggregate_function must be 0..3, got {aggregate_function}")
    limits = np.finfo(dtype)
    return float(limits.max if aggregate_function == _MIN else limits.min)


def _aggregate(prepared: PreparedTreeEnsemble, leaves: np.ndarray, n_targets: int, aggregate_function: int,
               start: float) -> np.ndarray:
    """[N, n_targets] float64: the reached leaves' weights combined per target. Each (sample,
    target) cell takes its additions in tree order, as a tree-by-tree loop would."""
    samples = leaves.shape[0]
    cells = (prepared.leaf_targets[leaves] + (np.arange(samples) * n_targets)[:, None]).reshape(-1)
    weights = prepared.leaf_weights[leaves].reshape(-1)
    if aggregate_function in (_AVERAGE, _SUM):
        # bincount adds its weights one after the other into zeros: the loop's sums, bit for bit.
        scores = np.bincount(cells, weights, minlength=samples * n_targets).astype(np.float64, copy=False)
        scores = scores.reshape(samples, n_targets)
        if aggregate_function == _AVERAGE:
            scores /= leaves.shape[1]
        return scores
    scores = np.full(samples * n_targets, start, dtype=np.float64)
    (np.minimum if aggregate_function == _MIN else np.maximum).at(scores, cells, weights)
    return scores.reshape(samples, n_targets)


@kernel("TreeEnsemble", since=5, domain="ai.onnx.ml", prepare=prepare_tree_ensemble)
def TreeEnsemble(X, *, aggregate_function=1, leaf_targetids, leaf_weights, membership_values=None, n_targets,
                 nodes_falseleafs, nodes_falsenodeids, nodes_featureids, nodes_hitrates=None,
                 nodes_missing_value_tracks_true=None, nodes_modes, nodes_splits, nodes_trueleafs,
                 nodes_truenodeids, post_transform=0, tree_roots, prepared=None):
    X = np.asarray(X)
    if X.ndim != 2:
        raise KernelError(f"TreeEnsemble: X must be [N, F], got shape {X.shape}")
    if prepared is None:
        prepared = prepare_tree_ensemble(
            [X], [X.shape], leaf_targetids=leaf_targetids, leaf_weights=leaf_weights,
            membership_values=membership_values, n_targets=n_targets, nodes_falseleafs=nodes_falseleafs,
            nodes_falsenodeids=nodes_falsenodeids, nodes_featureids=nodes_featureids,
            nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, nodes_modes=nodes_modes,
            nodes_splits=nodes_splits, nodes_trueleafs=nodes_trueleafs, nodes_truenodeids=nodes_truenodeids,
            tree_roots=tree_roots)
    start = _start(aggregate_function, X.dtype)
    scores = np.empty((X.shape[0], n_targets))
    for rows, leaves in prepared.walk.leaves_by_slice(np.asarray(X, dtype=np.float64)):
        scores[rows] = _aggregate(prepared, leaves, n_targets, aggregate_function, start)
    return _post_transform(scores, post_transform).astype(X.dtype)
