"""Random tree ensembles written as the ai.onnx.ml tree ops' attributes, for the kernel tests.

A forest mixes trees of different depths (a one-leaf tree included), splits of every branch
mode on thresholds the features often equal, NaN sent either way, and leaves weighing several
targets. The features come from a few values and NaN, so every comparison meets equal values
and missing ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LEGACY_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
MEMBER = 6
_VALUES = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
# ONNX Runtime takes small whole numbers only as set members.
_MEMBERS = np.array([0.0, 1.0, 2.0, 3.0])


@dataclass
class Split:
    feature: int
    mode: int  # 0..5 as LEGACY_MODES, 6 set membership
    threshold: float
    members: list[float]
    missing_true: bool
    true_branch: Split | Leaf
    false_branch: Split | Leaf


@dataclass
class Leaf:
    weights: dict[int, float] = field(default_factory=dict)  # target -> weight


def features(rng: np.random.Generator, rows: int, columns: int, dtype=np.float32) -> np.ndarray:
    x = rng.choice(_VALUES, size=(rows, columns)) + rng.choice([0.0, 0.25], size=(rows, columns))
    x[rng.random((rows, columns)) < 0.15] = np.nan
    return x.astype(dtype)


def random_trees(rng: np.random.Generator, depths: list[int], columns: int, targets: int, modes: list[int],
                 targets_per_leaf: int = 1) -> list[Split | Leaf]:
    """One tree per entry of ``depths`` (0: a single leaf), each split drawing its mode from ``modes``."""
    def grow(depth: int) -> Split | Leaf:
        if depth == 0 or (depth < max(depths) and rng.random() < 0.2):
            chosen = rng.choice(targets, size=rng.integers(1, targets_per_leaf + 1), replace=False)
            return Leaf({int(target): float(np.round(rng.normal(), 3)) for target in chosen})
        mode = int(rng.choice(modes))
        members = sorted(rng.choice(_MEMBERS, size=rng.integers(1, 4), replace=False).tolist()) if mode == MEMBER else []
        return Split(int(rng.integers(columns)), mode, float(rng.choice(_VALUES)), members, bool(rng.random() < 0.5),
                     grow(depth - 1), grow(depth - 1))
    return [grow(depth) for depth in depths]


def tree_ensemble_attributes(trees: list[Split | Leaf], targets: int, dtype=np.float32, **overrides) -> dict:
    """TreeEnsemble (ai.onnx.ml 5) attributes; a leaf weighs one target (its first)."""
    nodes: dict[str, list] = {name: [] for name in ("featureids", "modes", "splits", "missing", "truenodeids",
                                                     "trueleafs", "falsenodeids", "falseleafs")}
    leaf_targets, leaf_weights, members, roots = [], [], [], []

    def leaf_index(leaf: Leaf) -> int:
        target, weight = next(iter(leaf.weights.items()))
        leaf_targets.append(target)
        leaf_weights.append(weight)
        return len(leaf_weights) - 1

    def add(split: Split) -> int:
        index = len(nodes["modes"])
        for name, value in (("featureids", split.feature), ("modes", split.mode), ("splits", split.threshold),
                            ("missing", int(split.missing_true))):
            nodes[name].append(value)
        for side in ("true", "false"):
            nodes[f"{side}nodeids"].append(0)
            nodes[f"{side}leafs"].append(0)
        if split.mode == MEMBER:
            members.extend([*split.members, np.nan])
        for side, branch in (("true", split.true_branch), ("false", split.false_branch)):
            is_leaf = isinstance(branch, Leaf)
            nodes[f"{side}nodeids"][index] = leaf_index(branch) if is_leaf else add(branch)
            nodes[f"{side}leafs"][index] = int(is_leaf)
        return index

    for tree in trees:
        if isinstance(tree, Leaf):  # a root whose two branches are the same leaf
            tree = Split(0, 0, 0.0, [], False, tree, tree)
            roots.append(len(nodes["modes"]))
            for name, value in (("featureids", 0), ("modes", 0), ("splits", 0.0), ("missing", 0),
                                ("truenodeids", leaf_index(tree.true_branch)), ("trueleafs", 1), ("falseleafs", 1)):
                nodes[name].append(value)
            nodes["falsenodeids"].append(nodes["truenodeids"][-1])
        else:
            roots.append(add(tree))
    attributes = {
        "n_targets": targets, "tree_roots": roots, "nodes_featureids": nodes["featureids"],
        "nodes_modes": np.array(nodes["modes"], dtype=np.uint8), "nodes_splits": np.array(nodes["splits"], dtype=dtype),
        "nodes_missing_value_tracks_true": nodes["missing"],
        "nodes_truenodeids": nodes["truenodeids"], "nodes_trueleafs": nodes["trueleafs"],
        "nodes_falsenodeids": nodes["falsenodeids"], "nodes_falseleafs": nodes["falseleafs"],
        "leaf_targetids": leaf_targets, "leaf_weights": np.array(leaf_weights, dtype=dtype),
    }
    if members:
        attributes["membership_values"] = np.array(members, dtype=dtype)
    attributes.update(overrides)
    return attributes


def legacy_attributes(trees: list[Split | Leaf], prefix: str, **overrides) -> dict:
    """TreeEnsembleRegressor (``prefix`` "target") or TreeEnsembleClassifier ("class") attributes.
    Node ids count down within a tree and the trees come in reverse id order, so the kernels
    must look nodes up by id rather than position."""
    nodes: dict[str, list] = {name: [] for name in ("treeids", "nodeids", "featureids", "modes", "values",
                                                     "truenodeids", "falsenodeids", "missing_value_tracks_true")}
    leaves: dict[str, list] = {name: [] for name in ("treeids", "nodeids", "ids", "weights")}
    for tree_id, tree in reversed(list(enumerate(trees))):
        order = _preorder(tree)
        ids = {id(node): len(order) - 1 - position for position, node in enumerate(order)}
        for node in order:
            split = node if isinstance(node, Split) else None
            row = {"treeids": tree_id, "nodeids": ids[id(node)], "featureids": split.feature if split else 0,
                   "modes": LEGACY_MODES[split.mode] if split else "LEAF", "values": split.threshold if split else 0.0,
                   "truenodeids": ids[id(split.true_branch)] if split else 0,
                   "falsenodeids": ids[id(split.false_branch)] if split else 0,
                   "missing_value_tracks_true": int(split.missing_true) if split else 0}
            for name, value in row.items():
                nodes[name].append(value)
            for target, weight in ({} if split else node.weights).items():
                for name, value in (("treeids", tree_id), ("nodeids", ids[id(node)]), ("ids", target),
                                    ("weights", weight)):
                    leaves[name].append(value)
    attributes = {f"nodes_{name}": values for name, values in nodes.items()}
    attributes.update({f"{prefix}_{name}": values for name, values in leaves.items()})
    attributes.update(overrides)
    return attributes


def _preorder(node: Split | Leaf) -> list[Split | Leaf]:
    if isinstance(node, Leaf):
        return [node]
    return [node, *_preorder(node.true_branch), *_preorder(node.false_branch)]
