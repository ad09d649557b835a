"""The numpy engine's fusion of SwiftFormer's efficient additive attention, as exported.

transformers' SwiftFormer scores each token with a one-column product, takes a softmax over that
size-1 last axis (every weight 1), pools the weighted queries over the tokens and broadcasts the
pooled vector back onto the keys with Expand and Tile::

    q ─┬─► MatMul(q, w (D, 1)) ─► Softmax(axis -1) ─► Mul(·, q) ─► ReduceSum(axis 1) ─► Unsqueeze(1)
       │                                                        ─► [Expand(ones)] ─► Tile(1, T, 1) ─┐
    k ─┴──────────────────────────────────────────────────────────────────────────────────────────┴─► Mul ─► y

Eight kernel calls on a few thousand values, a fifth of SwiftFormer's run. The fused step makes
them five numpy calls: the scores, the softmax over one element (``exp(s - s) / 1``, that is
``s - s + 1``: 1 where the score is finite, NaN where the kernel gives NaN), the weighted sum over
the tokens as one product ``aᵀ q`` (the ReduceSum's sum in another order) and the product with
``k``, broadcast as Tile would have repeated it. Inputs of other shapes run the nodes' own kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, Graph, plain, run_steps

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_additive_attention(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each additive attention block (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for tile in steps:
        if tile.node.op_type != "Tile" or not plain(tile, 2):
            continue
        match = _match(tile, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match.block):
            continue
        last = match.block[-1]
        fused[id(last)] = replace(
            last, fn=match, inputs=[match.q, match.k], outputs=[last.outputs[0]], attributes={}, output_count=None,
            activation=None, kernel_applies_activation=False, wants_allocate=True, prepare=None, prepared=None,
            memo=None, memo_sources=[])
        dropped.update(id(s) for s in match.block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _ints(value: Any) -> list[int] | None:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
        return None
    return [int(v) for v in value]


def _match(tile: _Step, graph: Graph, constants: dict[int, Any]) -> AdditiveAttention | None:
    """The :class:`AdditiveAttention` ending in the Mul that alone reads ``tile``, or None."""
    if _ints(constants.get(tile.inputs[1])) is None or tile.inputs[0] in constants:
        return None
    expand = graph.producer(tile.inputs[0], "Expand", 2)
    if expand is not None:
        shape = _ints(constants.get(expand.inputs[1]))
        if shape is None or any(size != 1 for size in shape) or len(shape) > 3:
            return None
    unsqueeze = graph.producer((expand or tile).inputs[0], "Unsqueeze", 2)
    axes = _ints(constants.get(unsqueeze.inputs[1])) if unsqueeze is not None else None
    if axes not in ([1], [-2]):
        return None
    reduce = graph.producer(unsqueeze.inputs[0], "ReduceSum", 2)
    if (reduce is None or _ints(constants.get(reduce.inputs[1])) not in ([1], [-2])
            or reduce.attributes.get("keepdims", 1) != 0):
        return None
    weighted = graph.producer(reduce.inputs[0], "Mul", 2)
    if weighted is None:
        return None
    for position in (0, 1):
        softmax = graph.producer(weighted.inputs[position], "Softmax", 1)
        q = weighted.inputs[1 - position]
        score = graph.producer(softmax.inputs[0], "MatMul", 2) if softmax is not None else None
        if score is not None and score.inputs[0] == q and softmax.attributes.get("axis", -1) in (-1, 2):
            break
    else:
        return None
    w = constants.get(score.inputs[1])
    if not isinstance(w, np.ndarray) or w.dtype not in FLOATS or w.ndim != 2 or w.shape[1] != 1 or q in constants:
        return None
    final = graph.only_reader(tile.outputs[0], "Mul", 2, None, first=False)
    if final is None:
        return None
    k = final.inputs[1] if final.inputs[0] == tile.outputs[0] else final.inputs[0]
    block = [score, softmax, weighted, reduce, unsqueeze, *([expand] if expand else []), tile, final]
    order = [graph.position[id(step)] for step in block]
    if order != sorted(order) or k in constants:
        return None
    return AdditiveAttention(block, q, k, w, constants)


class AdditiveAttention:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], q: int, k: int, w: np.ndarray, constants: dict[int, Any]) -> None:
        self.block = block
        self.q, self.k = q, k
        self.w = w
        self.repeats = constants[block[-2].inputs[1]]  # the Tile's
        self.constants = constants

    def __call__(self, q: Any, k: Any, allocate: Callable = np.empty) -> Any:
        dtype = self.w.dtype
        if (type(q) is not np.ndarray or type(k) is not np.ndarray or q.dtype != dtype or k.dtype != dtype
                or q.ndim != 3 or q.shape[2] != self.w.shape[0] or self.repeats.shape != (3,)
                or k.shape != (q.shape[0], int(self.repeats[1]), q.shape[2])
                or int(self.repeats[0]) != 1 or int(self.repeats[2]) != 1):
            return run_steps(self.block, {self.q: q, self.k: k}, self.constants, allocate)
        weights = np.matmul(q, self.w)
        np.subtract(weights, weights, out=weights)  # the softmax over one element: exp(0) / 1
        weights += dtype.type(1)
        pooled = np.matmul(weights.transpose(0, 2, 1), q)  # (B, 1, D): the ReduceSum, then Unsqueeze
        return np.multiply(k, pooled)
