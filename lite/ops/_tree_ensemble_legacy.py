"""The tree walk that TreeEnsembleRegressor and TreeEnsembleClassifier (ai.onnx.ml opsets 1-3) share.

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleRegressor.html. Nodes are parallel
``nodes_*`` lists keyed by (tree id, node id): an interior node sends sample ``x`` to
``nodes_truenodeids`` when ``x[feature] <mode> value`` holds (BRANCH_LEQ, BRANCH_LT, BRANCH_GTE,
BRANCH_GT, BRANCH_EQ, BRANCH_NEQ) or when the feature is NaN and
``nodes_missing_value_tracks_true`` is set, else to ``nodes_falsenodeids``; a LEAF node stops.
Each leaf adds weights to targets (``*_treeids``, ``*_nodeids``, ``*_ids``, ``*_weights``).

Every sample walks every tree at once: one step moves all (sample, tree) positions one level
down, so the loop runs as many times as the deepest tree is deep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import text

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
_LEAF = _MODES.index("LEAF")


@dataclass
class Forest:
    """The nodes of all trees as flat arrays, in the attributes' order."""

    features: np.ndarray
    modes: np.ndarray  # index into _MODES
    values: np.ndarray
    true_next: np.ndarray  # flat index of the true branch (leaves: themselves)
    false_next: np.ndarray
    missing_true: np.ndarray
    roots: np.ndarray  # flat index of each tree's root, in tree id order
    index: dict[tuple[int, int], int]  # (tree id, node id) -> flat index


def build_forest(op: str, treeids, nodeids, featureids, modes, values, truenodeids, falsenodeids,
                 missing_tracks_true) -> Forest:
    count = len(nodeids)
    lists = {"nodes_treeids": treeids, "nodes_featureids": featureids, "nodes_modes": modes,
             "nodes_values": values, "nodes_truenodeids": truenodeids, "nodes_falsenodeids": falsenodeids}
    for name, items in lists.items():
        if items is None or len(items) != count:
            raise KernelError(f"{op}: {name} has {0 if items is None else len(items)} entries, nodes_nodeids {count}")
    index = {(int(tree), int(node)): position for position, (tree, node) in enumerate(zip(treeids, nodeids))}
    if len(index) != count:
        raise KernelError(f"{op}: a (tree id, node id) pair appears twice in nodes_treeids/nodes_nodeids")
    mode_codes = np.empty(count, dtype=np.int64)
    for position, mode in enumerate(modes):
        name = text(mode)
        if name not in _MODES:
            raise KernelError(f"{op}: node mode {name!r} is not one of {', '.join(_MODES)}")
        mode_codes[position] = _MODES.index(name)
    true_next, false_next = np.arange(count), np.arange(count)
    for position in np.flatnonzero(mode_codes != _LEAF):
        tree = int(treeids[position])
        for target, ids in ((true_next, truenodeids), (false_next, falsenodeids)):
            key = (tree, int(ids[position]))
            if key not in index:
                raise KernelError(f"{op}: node {int(nodeids[position])} of tree {tree} branches to missing node {key[1]}")
            target[position] = index[key]
    roots = _roots(treeids, true_next, false_next, mode_codes)
    tracks = np.zeros(count, dtype=bool)
    if missing_tracks_true is not None and len(missing_tracks_true):
        tracks[:] = np.asarray(missing_tracks_true, dtype=bool)
    return Forest(np.asarray(featureids, dtype=np.int64), mode_codes, np.asarray(values, dtype=np.float64),
                  true_next, false_next, tracks, roots, index)


def _roots(treeids, true_next: np.ndarray, false_next: np.ndarray, modes: np.ndarray) -> np.ndarray:
    """Each tree's root: the one node of that tree no branch points to."""
    pointed = np.zeros(len(treeids), dtype=bool)
    interior = modes != _LEAF
    pointed[true_next[interior]] = True
    pointed[false_next[interior]] = True
    trees = np.asarray(treeids, dtype=np.int64)
    roots = []
    for tree in np.unique(trees):
        candidates = np.flatnonzero((trees == tree) & ~pointed)
        roots.append(candidates[0] if candidates.size else np.flatnonzero(trees == tree)[0])
    return np.asarray(roots, dtype=np.int64)


def reached_leaves(forest: Forest, X: np.ndarray) -> np.ndarray:
    """[N, trees]: the flat index of the leaf each sample reaches in each tree."""
    if forest.features.size and X.shape[1] <= int(np.max(forest.features[forest.modes != _LEAF], initial=-1)):
        raise KernelError(f"tree ensemble: a node reads feature {int(np.max(forest.features))}, X has {X.shape[1]}")
    positions = np.broadcast_to(forest.roots, (X.shape[0], forest.roots.shape[0])).copy()
    rows = np.arange(X.shape[0])[:, None]
    # Compare in X's precision against the thresholds rounded to it, as ONNX Runtime does.
    thresholds = forest.values.astype(X.dtype)
    for _ in range(len(forest.modes) + 1):
        mode = forest.modes[positions]
        active = mode != _LEAF
        if not active.any():
            return positions
        values = X[rows, np.where(active, forest.features[positions], 0)]
        split = thresholds[positions]
        goes_true = np.select(
            [mode == 0, mode == 1, mode == 2, mode == 3, mode == 4, mode == 5],
            [values <= split, values < split, values >= split, values > split, values == split, values != split],
            default=False,
        ) | (np.isnan(values) & forest.missing_true[positions])
        moved = np.where(goes_true, forest.true_next[positions], forest.false_next[positions])
        positions = np.where(active, moved, positions)
    raise KernelError("tree ensemble: the branches form a cycle")


def leaf_weights(op: str, forest: Forest, width: int, treeids, nodeids, ids,
                 weights) -> tuple[np.ndarray, np.ndarray]:
    """[nodes, width] twice: what reaching each node adds to each target or class, and whether the
    node names that target at all (a weight of 0 still counts)."""
    table = np.zeros((len(forest.modes), width), dtype=np.float64)
    named = np.zeros((len(forest.modes), width), dtype=bool)
    if ids is None or not len(ids):
        return table, named
    for tree, node, target, weight in zip(treeids, nodeids, ids, weights):
        key = (int(tree), int(node))
        if key not in forest.index or not 0 <= int(target) < width:
            raise KernelError(f"{op}: a weight goes to node {key[1]} of tree {key[0]}, target {int(target)}, "
                              f"outside the {width} targets or the nodes")
        table[forest.index[key], int(target)] += weight
        named[forest.index[key], int(target)] = True
    return table, named


def aggregate(op: str, forest: Forest, leaves: np.ndarray, table: np.ndarray, named: np.ndarray,
              function) -> tuple[np.ndarray, np.ndarray]:
    """[N, width] twice: the leaves' weights combined across trees by SUM, AVERAGE, MIN or MAX
    (MIN and MAX over the trees whose leaf names the target), and whether any leaf named it.
    One tree at a time, so memory stays [N, width] however many trees there are."""
    name = text(function)
    if name not in ("SUM", "AVERAGE", "MIN", "MAX"):
        raise KernelError(f"{op}: aggregate_function must be SUM, AVERAGE, MIN or MAX, got {name!r}")
    samples, width = leaves.shape[0], table.shape[1]
    start = {"MIN": np.inf, "MAX": -np.inf}.get(name, 0.0)
    scores = np.full((samples, width), start)
    reached = np.zeros((samples, width), dtype=bool)
    for tree in range(leaves.shape[1]):
        weights, hits = table[leaves[:, tree]], named[leaves[:, tree]]
        reached |= hits
        if name in ("SUM", "AVERAGE"):
            scores += weights
        elif name == "MIN":
            scores = np.where(hits, np.minimum(scores, weights), scores)
        else:
            scores = np.where(hits, np.maximum(scores, weights), scores)
    if name == "AVERAGE":
        scores /= max(forest.roots.shape[0], 1)
    return np.where(reached, scores, 0.0) if name in ("MIN", "MAX") else scores, reached
