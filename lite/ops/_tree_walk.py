"""Every sample through every tree of an ensemble at once, one level per step, for the tree
ensemble kernels (lite.ops.tree_ensemble and the legacy TreeEnsembleRegressor/Classifier).

https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsemble.html. An interior node sends sample
``x`` to its true branch when ``x[feature] <mode> split`` holds, or when the feature is NaN and
the node's missing values track true; modes are :data:`LEQ` .. :data:`MEMBER` (<=, <, >=, >,
==, !=, member of a set). A branch is another interior node or a leaf.

The forest is flattened once (:func:`build_walk`, at load when the engine prepares the node)
into arrays indexed by a *position*: interior node ``i`` sits at positions ``2i`` (its false
branch) and ``2i + 1`` (its true branch), so one gather ``children[position + goes_true]``
moves a sample down; leaf ``l`` sits at ``2 * interior + 2l`` and ``+ 1``, both branches
leading back to itself. A call then steps all (sample, tree) pairs down together, dropping
those that reached a leaf now and then, so a step costs a few numpy operations whatever the
number of trees (a node-by-node walk in Python made numpy calls per node and took 19 ms a
sample through a LightGBM model's 565 trees; this walk takes 0.15 ms).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from lite.errors import KernelError

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)

# (sample, tree) pairs stepped together: the working arrays stay in cache, a batch's many pairs
# are walked in slices of about this many.
_SLICE_PAIRS = 1 << 16
# Pairs that reached a leaf are dropped from the walk once they are at least 1 in this many.
_DROP_FINISHED = 4


@dataclass(frozen=True)
class Branches:
    """One side (true or false) of every interior node: the node or leaf it leads to."""

    targets: np.ndarray  # node index, or leaf index where ``is_leaf``
    is_leaf: np.ndarray


@dataclass(frozen=True)
class TreeWalk:
    """An ensemble's interior nodes as flat arrays by position (see the module docstring)."""

    # By position, 2 * (interior nodes + leaves) entries; a leaf's are 0 and its own position.
    features: np.ndarray  # the column each node reads
    splits: dict[str, np.ndarray]  # thresholds rounded to X's dtype, by its character ("f", "d")
    modes: np.ndarray  # LEQ .. MEMBER
    children: np.ndarray  # where each side leads: a node's position or a leaf's
    missing_true: np.ndarray | None  # bool, None when no node tracks NaN to true
    roots: np.ndarray  # each tree's first position
    leaf_base: int  # leaf ``l`` is position ``leaf_base + 2l``
    depth: int  # the most interior nodes one walk visits
    width: int  # the columns the reachable nodes read
    modes_used: tuple[int, ...]  # the modes of reachable nodes
    members: MemberSets | None

    def leaves_by_slice(self, X: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
        """For consecutive slices of X's rows: the slice, and [rows, trees] int, the leaf each of
        its rows reaches in each tree. X is 2-D, float32 or float64 (the dtype compared in). A
        slice holds about ``_SLICE_PAIRS`` (sample, tree) pairs, so what a caller builds per pair
        stays that small however large the batch."""
        if X.shape[1] < self.width:
            raise KernelError(f"tree ensemble: the trees read feature {self.width - 1}, X has {X.shape[1]} "
                              f"columns (shape {X.shape}); feed X with all the model's features")
        X = np.ascontiguousarray(X)
        splits = self.splits[X.dtype.char]
        track_missing = self.missing_true is not None and bool(np.isnan(X).any())
        trees = self.roots.shape[0]
        step = max(1, _SLICE_PAIRS // max(trees, 1))
        for start in range(0, X.shape[0], step):
            rows = X[start:start + step]
            leaves = np.empty((rows.shape[0], trees), dtype=np.int64)
            if leaves.size:
                self._walk(rows.reshape(-1), rows.shape, splits, track_missing, leaves.reshape(-1))
            yield slice(start, start + rows.shape[0]), leaves

    def _walk(self, values: np.ndarray, shape: tuple[int, int], splits: np.ndarray, track_missing: bool,
              leaves: np.ndarray) -> None:
        """Fill ``leaves`` ([rows * trees], row-major) for the rows whose flat values are given."""
        rows, columns = shape
        trees = self.roots.shape[0]
        positions = np.tile(self.roots, rows)
        pairs = np.arange(rows * trees)
        row_starts = np.repeat(np.arange(0, rows * columns, columns), trees)
        for _ in range(self.depth):
            finished = np.count_nonzero(positions >= self.leaf_base)
            if finished == positions.shape[0]:
                break
            if finished * _DROP_FINISHED >= positions.shape[0]:
                # Finished pairs step in place (a leaf's branches lead to itself) until they are
                # worth dropping: dropping costs four passes over the pairs.
                leaves[pairs] = positions
                walking = np.flatnonzero(positions < self.leaf_base)
                positions, pairs, row_starts = positions[walking], pairs[walking], row_starts[walking]
            read = values[row_starts + self.features[positions]]
            goes_true = self._goes_true(read, positions, splits)
            if track_missing:
                missing = np.flatnonzero(np.isnan(read))
                goes_true[missing] |= self.missing_true[positions[missing]]
            positions = self.children[positions + goes_true]
        leaves[pairs] = positions
        leaves -= self.leaf_base
        leaves //= 2

    def _goes_true(self, read: np.ndarray, positions: np.ndarray, splits: np.ndarray) -> np.ndarray:
        if len(self.modes_used) == 1:
            return self._compare(self.modes_used[0], read, positions, splits)
        modes = self.modes[positions]
        goes_true = np.empty(read.shape, dtype=bool)
        for mode in self.modes_used:
            chosen = np.flatnonzero(modes == mode)
            goes_true[chosen] = self._compare(mode, read[chosen], positions[chosen], splits)
        return goes_true

    def _compare(self, mode: int, read: np.ndarray, positions: np.ndarray, splits: np.ndarray) -> np.ndarray:
        if mode == MEMBER:
            return self.members.contain(read, positions)
        split = splits[positions]
        if mode == LEQ:
            return read <= split
        if mode == LT:
            return read < split
        if mode == GTE:
            return read >= split
        if mode == GT:
            return read > split
        if mode == EQ:
            return read == split
        return read != split


@dataclass(frozen=True)
class MemberSets:
    """The sets of the MEMBER nodes, sorted, end to end; node position ``p`` owns
    ``values[starts[p]:stops[p]]``."""

    values: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    longest: int

    def contain(self, read: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Whether each value is in its node's set (np.isin's answer), by a binary search of
        all the sets at once."""
        low, high = self.starts[positions], self.stops[positions]
        stop = high
        for _ in range(max(self.longest, 1).bit_length()):
            middle = (low + high) // 2
            below = self.values[np.minimum(middle, self.values.shape[0] - 1)] < read
            searching = low < high
            low = np.where(searching & below, middle + 1, low)
            high = np.where(searching & ~below, middle, high)
        found = low < stop
        return found & (self.values[np.where(found, low, 0)] == read)


def member_sets(member_nodes: np.ndarray, groups: list[np.ndarray], position_count: int) -> MemberSets | None:
    """:class:`MemberSets` for the MEMBER nodes ``member_nodes`` (node indices), whose sets are
    ``groups`` in the same order, over ``position_count`` positions (every other one owns an
    empty set); None when there are none."""
    if not len(groups):
        return None
    sizes = np.array([group.shape[0] for group in groups], dtype=np.int64)
    ends = np.cumsum(sizes)
    starts = np.zeros(position_count, dtype=np.int64)
    stops = np.zeros(position_count, dtype=np.int64)
    for side in (0, 1):
        starts[2 * member_nodes + side] = ends - sizes
        stops[2 * member_nodes + side] = ends
    values = np.concatenate([np.sort(group) for group in groups]).astype(np.float64)
    # An empty concatenation still needs one entry for the search's clamped reads.
    return MemberSets(values if values.size else np.zeros(1), starts, stops, int(sizes.max(initial=0)))


def build_walk(op: str, features: np.ndarray, splits: np.ndarray, modes: np.ndarray, true_branches: Branches,
               false_branches: Branches, missing_true: np.ndarray, roots: Branches, leaf_count: int,
               members: tuple[np.ndarray, list[np.ndarray]] | None = None) -> TreeWalk:
    """The :class:`TreeWalk` of interior nodes given as parallel arrays (``modes`` LEQ .. MEMBER,
    ``splits`` float64), checking every branch leads somewhere and the trees have no cycle."""
    interior = features.shape[0]
    missing_true = np.zeros(interior, dtype=bool) if not len(missing_true) else np.asarray(missing_true, dtype=bool)
    _check_lengths(op, interior, nodes_splits=splits, nodes_modes=modes, nodes_truenodeids=true_branches.targets,
                   nodes_trueleafs=true_branches.is_leaf, nodes_falsenodeids=false_branches.targets,
                   nodes_falseleafs=false_branches.is_leaf, nodes_missing_value_tracks_true=missing_true)
    leaf_base = 2 * interior
    # A leaf's two branches lead to itself: a finished pair may keep stepping (see TreeWalk._walk).
    children = np.concatenate([np.empty(leaf_base, dtype=np.int64), np.repeat(leaf_base + 2 * np.arange(leaf_count), 2)])
    for side, branches in ((0, false_branches), (1, true_branches)):
        children[side:leaf_base:2] = _positions(op, branches, interior, leaf_count, "a node's branch")
    root_positions = _positions(op, roots, interior, leaf_count, "a tree's root")
    reachable, depth = _reach(op, children, root_positions, leaf_base)
    read = features[reachable]
    if read.size and read.min() < 0:
        raise KernelError(f"{op}: node {int(reachable[np.argmin(read)])} reads feature {int(read.min())}; "
                          "feature ids must be >= 0")
    thresholds = _by_position(np.asarray(splits, dtype=np.float64), leaf_count)
    return TreeWalk(
        features=_by_position(np.asarray(features, dtype=np.int64), leaf_count),
        splits={"d": thresholds, "f": thresholds.astype(np.float32)},
        modes=_by_position(modes, leaf_count), children=children,
        missing_true=_by_position(missing_true, leaf_count) if missing_true.any() else None,
        roots=root_positions, leaf_base=leaf_base, depth=depth, width=int(read.max(initial=-1)) + 1,
        modes_used=tuple(int(mode) for mode in np.unique(modes[reachable])),
        members=None if members is None else member_sets(*members, children.shape[0]),
    )


def _by_position(per_node: np.ndarray, leaf_count: int) -> np.ndarray:
    """A per-node array by position: each node's entry twice, then zeros for the leaves."""
    return np.concatenate([np.repeat(per_node, 2), np.zeros(2 * leaf_count, dtype=per_node.dtype)])


def _check_lengths(op: str, interior: int, **arrays: np.ndarray) -> None:
    for name, values in arrays.items():
        if len(values) != interior:
            raise KernelError(f"{op}: {name} has {len(values)} entries, nodes_featureids {interior}; "
                              "give every nodes_* attribute one entry per node")


def _positions(op: str, branches: Branches, interior: int, leaf_count: int, what: str) -> np.ndarray:
    targets = np.asarray(branches.targets, dtype=np.int64)
    is_leaf = np.asarray(branches.is_leaf, dtype=bool)
    bad = np.flatnonzero(np.where(is_leaf, targets >= leaf_count, targets >= interior) | (targets < 0))
    if bad.size:
        kind = "leaf" if is_leaf[bad[0]] else "node"
        limit = leaf_count if is_leaf[bad[0]] else interior
        raise KernelError(f"{op}: {what} (entry {int(bad[0])}) leads to {kind} {int(targets[bad[0]])}, "
                          f"outside the {limit} {kind}s")
    return np.where(is_leaf, 2 * interior + 2 * targets, 2 * targets)


def _reach(op: str, children: np.ndarray, roots: np.ndarray, leaf_base: int) -> tuple[np.ndarray, int]:
    """The interior nodes some root leads to (node indices) and the most of them one walk visits."""
    reached = np.zeros(leaf_base // 2, dtype=bool)
    frontier = np.unique(roots[roots < leaf_base]) // 2
    depth = 0
    while frontier.size:
        depth += 1
        if depth > reached.shape[0]:
            raise KernelError(f"{op}: the branches form a cycle (node {int(frontier[0])} is met again)")
        reached[frontier] = True
        following = children[np.concatenate([2 * frontier, 2 * frontier + 1])]
        frontier = np.unique(following[following < leaf_base]) // 2
    return np.flatnonzero(reached), depth
