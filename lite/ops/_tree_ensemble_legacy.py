"""The trees that TreeEnsembleRegressor and TreeEnsembleClassifier (ai.onnx.ml opsets 1-3) share.

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsembleRegressor.html. Nodes are parallel
``nodes_*`` lists keyed by (tree id, node id): an interior node sends sample ``x`` to
``nodes_truenodeids`` when ``x[feature] <mode> value`` holds (BRANCH_LEQ, BRANCH_LT, BRANCH_GTE,
BRANCH_GT, BRANCH_EQ, BRANCH_NEQ) or when the feature is NaN and
``nodes_missing_value_tracks_true`` is set, else to ``nodes_falsenodeids``; a LEAF node stops.
Each leaf adds weights to targets (``*_treeids``, ``*_nodeids``, ``*_ids``, ``*_weights``).

The lists are flattened once (:func:`prepare_forest`, the kernels' load-time hook), every sample
walks every tree together (:mod:`lite.ops._tree_walk`, comparing in X's precision against the
thresholds rounded to it, as ONNX Runtime does), and the leaves' weights are combined in tree
order, as a tree-by-tree loop combines them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.errors import KernelError
from lite.ops._ml_common import text
from lite.ops._tree_walk import Branches, TreeWalk, build_walk

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
_LEAF = _MODES.index("LEAF")


@dataclass(frozen=True)
class LeafTable:
    """What reaching each node adds: node ``i`` (flat index) adds ``weights[starts[i]:starts[i + 1]]``
    to ``targets[starts[i]:starts[i + 1]]`` (one entry per target it names; a weight of 0 still
    names its target)."""

    starts: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    width: int
    one_each: bool  # every leaf names exactly one target (a regressor's trees, a booster's)


@dataclass(frozen=True)
class Forest:
    """The trees ready to walk (a leaf is its node's flat index, in the attributes' order) and
    what their leaves add."""

    walk: TreeWalk
    table: LeafTable

    def aggregate(self, op: str, X: np.ndarray, function) -> tuple[np.ndarray, np.ndarray]:
        """[N, width] twice: the reached leaves' weights combined across trees by SUM, AVERAGE,
        MIN or MAX (MIN and MAX over the trees whose leaf names the target), and whether any
        leaf named it. Each (sample, target) cell takes its weights in tree order."""
        name = text(function)
        if name not in ("SUM", "AVERAGE", "MIN", "MAX"):
            raise KernelError(f"{op}: aggregate_function must be SUM, AVERAGE, MIN or MAX, got {name!r}")
        scores = np.empty((X.shape[0], self.table.width))
        reached = np.empty((X.shape[0], self.table.width), dtype=bool)
        for rows, leaves in self.walk.leaves_by_slice(X):
            scores[rows], reached[rows] = self._combine(name, leaves)
        return scores, reached

    def _combine(self, name: str, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cells, weights = self._entries(leaves)
        size = leaves.shape[0] * self.table.width
        reached = (np.bincount(cells, minlength=size) > 0).reshape(leaves.shape[0], -1)
        if name in ("SUM", "AVERAGE"):
            # bincount adds its weights one after the other into zeros: a loop's sums, bit for bit.
            scores = np.bincount(cells, weights, minlength=size).astype(np.float64, copy=False).reshape(reached.shape)
            if name == "AVERAGE":
                scores /= max(leaves.shape[1], 1)
            return scores, reached
        scores = np.full(size, np.inf if name == "MIN" else -np.inf)
        (np.minimum if name == "MIN" else np.maximum).at(scores, cells, weights)
        return np.where(reached, scores.reshape(reached.shape), 0.0), reached

    def _entries(self, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (sample * width + target) cell and weight of every table entry the reached leaves
        name, sample by sample, tree by tree."""
        table = self.table
        rows = np.repeat(np.arange(0, leaves.shape[0] * table.width, table.width), leaves.shape[1])
        starts = table.starts[leaves].reshape(-1)
        if table.one_each:
            return rows + table.targets[starts], table.weights[starts]
        counts = table.starts[leaves + 1].reshape(-1) - starts
        ends = np.cumsum(counts)
        entries = np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(starts - (ends - counts), counts)
        return np.repeat(rows, counts) + table.targets[entries], table.weights[entries]


class _NodeKeys:
    """(tree id, node id) pairs looked up as sorted int64 keys (each id replaced by its rank, so
    any int64 ids fit)."""

    def __init__(self, op: str, treeids: np.ndarray, nodeids: np.ndarray):
        self.trees, self.nodes = np.unique(treeids), np.unique(nodeids)
        keys, _ = self._keys(treeids, nodeids)
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]
        repeated = np.flatnonzero(self.sorted[1:] == self.sorted[:-1])
        if repeated.size:
            position = int(self.order[repeated[0]])
            raise KernelError(f"{op}: node {int(nodeids[position])} of tree {int(treeids[position])} appears twice "
                              "in nodes_treeids/nodes_nodeids")

    def _keys(self, treeids: np.ndarray, nodeids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tree_rank, known_tree = _rank(self.trees, treeids)
        node_rank, known_node = _rank(self.nodes, nodeids)
        return tree_rank * (self.nodes.shape[0] + 1) + node_rank, known_tree & known_node

    def find(self, treeids, nodeids) -> tuple[np.ndarray, np.ndarray]:
        """The flat index of each (tree, node) pair, and whether the pair exists at all."""
        keys, found = self._keys(np.asarray(treeids, dtype=np.int64), np.asarray(nodeids, dtype=np.int64))
        at, known = _rank(self.sorted, keys)
        found &= known
        return np.where(found, self.order[np.where(found, at, 0)] if self.order.size else 0, 0), found


def _rank(sorted_values: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each value sits in ``sorted_values``, and whether it is there."""
    rank = np.searchsorted(sorted_values, values)
    known = rank < sorted_values.shape[0]
    known[known] = sorted_values[rank[known]] == values[known]
    return rank, known


def prepare_forest(op: str, width: int, leaf_ids, leaf_treeids, leaf_nodeids, leaf_weights, *,
                   nodes_falsenodeids=None, nodes_featureids=None, nodes_missing_value_tracks_true=None,
                   nodes_modes=None, nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None,
                   nodes_values=None, nodes_values_as_tensor=None) -> Forest:
    """The ``nodes_*`` attributes flattened for the walk, and the leaf weights (the ``class_*`` or
    ``target_*`` lists) tabled for ``width`` classes or targets."""
    values = nodes_values_as_tensor if nodes_values_as_tensor is not None else nodes_values
    count = 0 if nodes_nodeids is None else len(nodes_nodeids)
    lists = {"nodes_treeids": nodes_treeids, "nodes_featureids": nodes_featureids, "nodes_modes": nodes_modes,
             "nodes_values": values, "nodes_truenodeids": nodes_truenodeids, "nodes_falsenodeids": nodes_falsenodeids}
    for name, items in lists.items():
        if items is None or len(items) != count:
            raise KernelError(f"{op}: {name} has {0 if items is None else len(items)} entries, nodes_nodeids {count}")
    nodes = {name: np.asarray(items, dtype=np.int64).reshape(-1) for name, items in lists.items()
             if name not in ("nodes_modes", "nodes_values")}
    nodes["nodes_nodeids"] = np.asarray(nodes_nodeids if count else [], dtype=np.int64).reshape(-1)
    keys = _NodeKeys(op, nodes["nodes_treeids"], nodes["nodes_nodeids"])
    modes = _mode_codes(op, nodes_modes)
    missing = np.zeros(count, dtype=bool)
    if nodes_missing_value_tracks_true is not None and len(nodes_missing_value_tracks_true):
        missing[:] = np.asarray(nodes_missing_value_tracks_true, dtype=bool)
    walk = _walk(op, keys, nodes, modes, np.asarray(values, dtype=np.float64).reshape(-1), missing)
    table = _leaf_table(op, keys, modes == _LEAF, width, leaf_ids, leaf_treeids, leaf_nodeids, leaf_weights)
    return Forest(walk, table)


def _mode_codes(op: str, modes) -> np.ndarray:
    names = [text(mode) for mode in modes]
    unknown = sorted(set(names) - set(_MODES))
    if unknown:
        raise KernelError(f"{op}: node mode {unknown[0]!r} is not one of {', '.join(_MODES)}")
    codes = {name: code for code, name in enumerate(_MODES)}
    return np.array([codes[name] for name in names], dtype=np.int64)


def _walk(op: str, keys: _NodeKeys, nodes: dict[str, np.ndarray], modes: np.ndarray, values: np.ndarray,
          missing: np.ndarray) -> TreeWalk:
    treeids, nodeids = nodes["nodes_treeids"], nodes["nodes_nodeids"]
    interior = np.flatnonzero(modes != _LEAF)
    rank = np.zeros(modes.shape[0], dtype=np.int64)
    rank[interior] = np.arange(interior.shape[0])
    sides = {}
    for side in ("true", "false"):
        branch = nodes[f"nodes_{side}nodeids"][interior]
        flat, found = keys.find(treeids[interior], branch)
        if not found.all():
            bad = int(np.flatnonzero(~found)[0])
            raise KernelError(f"{op}: node {int(nodeids[interior[bad]])} of tree {int(treeids[interior[bad]])} "
                              f"branches to missing node {int(branch[bad])}")
        sides[side] = flat
    roots = _roots(treeids, np.concatenate([sides["true"], sides["false"]]))
    # A leaf is named by its flat index, a node by its rank among the interior ones.
    true_branch, false_branch, tree_starts = (
        Branches(np.where(modes[flat] == _LEAF, flat, rank[flat]), modes[flat] == _LEAF)
        for flat in (sides["true"], sides["false"], roots))
    return build_walk(op, nodes["nodes_featureids"][interior], values[interior], modes[interior], true_branch,
                      false_branch, missing[interior], tree_starts, modes.shape[0])


def _roots(treeids: np.ndarray, pointed_to: np.ndarray) -> np.ndarray:
    """Each tree's root, in tree id order: the first node of that tree no branch points to (the
    tree's first node where every node is pointed to, a cycle the walk then reports)."""
    trees, tree_of = np.unique(treeids, return_inverse=True)
    free = np.ones(treeids.shape[0], dtype=bool)
    free[pointed_to] = False
    first_node = np.full(trees.shape[0], treeids.shape[0], dtype=np.int64)
    np.minimum.at(first_node, tree_of, np.arange(treeids.shape[0]))
    first_free = np.full(trees.shape[0], treeids.shape[0], dtype=np.int64)
    candidates = np.flatnonzero(free)
    np.minimum.at(first_free, tree_of[candidates], candidates)
    return np.where(first_free < treeids.shape[0], first_free, first_node)


def _leaf_table(op: str, keys: _NodeKeys, is_leaf: np.ndarray, width: int, ids, treeids, nodeids,
                weights) -> LeafTable:
    count = is_leaf.shape[0]
    if ids is None or not len(ids):
        return LeafTable(np.zeros(count + 1, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0), width, False)
    ids = np.asarray(ids, dtype=np.int64)
    weights = np.asarray(weights if weights is not None else [], dtype=np.float64).reshape(-1)
    treeids, nodeids = (np.asarray(items if items is not None else [], dtype=np.int64) for items in (treeids, nodeids))
    if not (len(treeids) == len(nodeids) == ids.shape[0] == weights.shape[0]):
        raise KernelError(f"{op}: the leaf weight lists differ in length (tree ids {len(treeids)}, node ids "
                          f"{len(nodeids)}, ids {ids.shape[0]}, weights {weights.shape[0]}); give one entry per weight")
    flat, found = keys.find(treeids, nodeids)
    bad = np.flatnonzero(~found | (ids < 0) | (ids >= width))
    if bad.size:
        first = int(bad[0])
        raise KernelError(f"{op}: a weight goes to node {int(nodeids[first])} of tree {int(treeids[first])}, target "
                          f"{int(ids[first])}, outside the {width} targets or the nodes")
    # One entry per (node, target): a node's weights for one target add up in the order given.
    cells, position = np.unique(flat * width + ids, return_inverse=True)
    summed = np.bincount(position.reshape(-1), weights, minlength=cells.shape[0]).astype(np.float64, copy=False)
    starts = np.searchsorted(cells // width, np.arange(count + 1))
    one_each = bool(np.all(np.diff(starts)[is_leaf] == 1))
    return LeafTable(starts, cells % width, summed, width, one_each)
