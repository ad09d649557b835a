"""The numpy engine's fusion of MobileViTV2's separable self-attention: its seven nodes as one step.

MobileViTV2 (Mehta & Rastegari 2022) computes one context vector per patch position from a
query of one channel, and gates the values with it::

    x ─► Split(axis 1) ─┬─ q ─► Softmax(-1) ─► p ─┐
                        ├─ k ────────────────────┴─► Mul ─► ReduceSum(-1, keepdims) ─► c ─► Expand(shape) ─┐
                        └─ v ─► Relu ──────────────────────────────────────────────────────────────────────┴─► Mul ─► y

that is ``y = relu(v) · Σ_n k · softmax(q)``. On a 64x64 image each node runs on a few thousand
values, and Split and Expand (which writes ``c`` out to v's shape) cost more than the arithmetic.
The fused step cuts q, k and v as views (Split's own windows), runs the Softmax, Mul, ReduceSum,
Relu and Mul kernels of the block in the same order, and lets the last Mul broadcast ``c``
instead of expanding it: the same values (each product reads the same operands). Inputs it does
not handle (parts that do not fit the split sizes, an Expand target that changes the product's
shape) run the block's kernels one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import Graph, is_kernel, plain
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_separable_attention(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every separable self-attention block (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "Mul" or not plain(step, 2):
            continue
        block, _reason = match_separable_attention(step, graph, constants)
        if block is None or any(id(s) in dropped or id(s) in fused for s in block if s is not None):
            continue
        split, softmax, product, reduce, relu, expand, gate = block
        inputs = [split.inputs[0], split.inputs[1], reduce.inputs[1]] + ([] if expand is None else expand.inputs[1:])
        fused[id(gate)] = replace(
            gate, fn=SeparableAttention(block, constants, inputs), inputs=inputs, attributes={}, output_count=None,
            activation=None, kernel_applies_activation=False, wants_allocate=True, prepare=None, prepared=None,
            memo=None, memo_sources=[])
        dropped.update(id(s) for s in block[:-1] if s is not None)
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def match_separable_attention(gate: _Step, graph: Graph, constants: dict[int, Any]) -> tuple[list[_Step] | None, str]:
    """(Split, Softmax, Mul, ReduceSum, Relu, Expand or None, Mul) ending in ``gate``, or None
    and why not (the Expand is absent where the Mul broadcasts the context itself)."""
    for position in (0, 1):
        relu = graph.producer(gate.inputs[position], "Relu", 1)
        context = gate.inputs[1 - position]
        expand = graph.producer(context, "Expand", 2)
        if expand is not None:
            context = expand.inputs[0]
        if relu is not None:
            break
    else:
        return None, "the Mul does not multiply a Relu"
    reduce = graph.producer(context, "ReduceSum", 2)
    if reduce is None or reduce.attributes.get("keepdims", 1) != 1:
        return None, "the Relu is not gated by a ReduceSum keeping its axes (or its Expand)"
    axes = constants.get(reduce.inputs[1])
    if not isinstance(axes, np.ndarray) or axes.dtype != np.int64 or axes.reshape(-1).tolist() != [-1]:
        return None, "the ReduceSum is not over the last axis"
    product = graph.producer(reduce.inputs[0], "Mul", 2)
    if product is None:
        return None, "the ReduceSum does not sum a Mul"
    for position in (0, 1):
        softmax = graph.producer(product.inputs[position], "Softmax", 1)
        if softmax is not None:
            k = product.inputs[1 - position]
            break
    else:
        return None, "the Mul does not weigh by a Softmax"
    if not is_kernel(softmax.fn, "softmax", "Softmax") or softmax.attributes.get("axis", -1) != -1:
        return None, "not a Softmax over the last axis (opset 13 on)"
    split = graph.producer_of.get(softmax.inputs[0])
    if (split is None or split.node.op_type != "Split" or split.node.domain or split.activation is not None
            or split.memo is not None or split.graph_attributes or len(split.inputs) != 2
            or split.outputs != [softmax.inputs[0], k, relu.inputs[0]]
            or not all(graph.single(index) for index in split.outputs) or split.inputs[0] in constants):
        return None, "q, k and v are not the three parts of one Split read by the block alone"
    sizes = constants.get(split.inputs[1])
    if not isinstance(sizes, np.ndarray) or sizes.dtype != np.int64 or sizes.ndim != 1 or len(sizes) != 3:
        return None, "the Split's sizes are not a constant"
    return [split, softmax, product, reduce, relu, expand, gate], ""


class SeparableAttention:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[Any], constants: dict[int, Any], inputs: list[int]) -> None:
        self.block = block
        self.constants = constants
        self.inputs = inputs
        split = block[0]
        self.axis = int(split.attributes.get("axis", 0))
        self.sizes = [int(size) for size in constants[split.inputs[1]]]
        # The operands' order in the two products, as the nodes have them.
        self.weights_first = block[2].inputs[0] == block[1].outputs[0]
        self.gated_first = block[6].inputs[0] == block[4].outputs[0]
        # (x's shape, the Expand target's bytes) -> q, k and v windows, or None: run in turn.
        self.windows: PlanCache[tuple[tuple[slice, ...], ...] | None] = PlanCache()

    def __call__(self, x: Any, sizes: Any, axes: Any, *shape: Any, allocate: Callable = np.empty) -> np.ndarray:
        """``shape``: the Expand's target, where the block has one."""
        args = (x, sizes, axes, *shape)
        target = shape[0] if shape else None
        if type(x) is not np.ndarray or sizes is not self.constants[self.inputs[1]] or (
                target is not None and (type(target) is not np.ndarray or target.dtype != np.int64 or target.ndim != 1)):
            return self._in_turn(args, allocate)
        key = (x.shape, None if target is None else target.tobytes())
        windows = self.windows.get(key, _UNKNOWN)
        if windows is _UNKNOWN:
            windows = self.windows.put(key, self._windows(x.shape, None if target is None else tuple(target.tolist())))
        if windows is None:
            return self._in_turn(args, allocate)
        _split, softmax, product, reduce, relu, _expand, gate = self.block
        q, k, v = x[windows[0]], x[windows[1]], x[windows[2]]
        p = _call(softmax, (q,), allocate)
        weighted = _call(product, (p, k) if self.weights_first else (k, p), allocate)
        context = _call(reduce, (weighted, axes), allocate)
        gated = _call(relu, (v,), allocate)
        return _call(gate, (gated, context) if self.gated_first else (context, gated), allocate)

    def _windows(self, shape: tuple[int, ...], target: tuple[int, ...] | None) -> tuple[tuple[slice, ...], ...] | None:
        """q's, k's and v's windows into an input of ``shape``, or None where the Split would
        fail or the Expand to ``target`` would give the gate another shape than v's."""
        rank = len(shape)
        if not -rank <= self.axis < rank or any(size < 0 for size in self.sizes):
            return None
        axis = self.axis % rank
        if shape[axis] != sum(self.sizes):
            return None
        windows, start = [], 0
        for size in self.sizes:
            index = [slice(None)] * rank
            index[axis] = slice(start, start + size)
            windows.append(tuple(index))
            start += size
        parts = [shape[:axis] + (size,) + shape[axis + 1:] for size in self.sizes]
        q, k, v = parts
        try:
            product = np.broadcast_shapes(k, q)
            context = product[:-1] + (1,)
            expanded = context if target is None else np.broadcast_shapes(context, target)
            if np.broadcast_shapes(v, expanded) != v or np.broadcast_shapes(v, context) != v:
                return None
        except ValueError:
            return None
        return tuple(windows)

    def _in_turn(self, args: tuple[Any, ...], allocate: Callable) -> Any:
        """The block's own kernels one after the other (the Split's three outputs kept)."""
        values = dict(zip(self.inputs, args))
        for step in self.block:
            if step is None:
                continue
            step_args = [values[i] if i in values else self.constants.get(i) for i in step.inputs]
            if step.wants_allocate:
                result = step.fn(*step_args, allocate=allocate, **step.keywords)
            else:
                result = step.fn(*step_args, **step.keywords)
            results = result if type(result) is tuple else (result,)
            values.update(zip(step.outputs, results))
        return values[self.block[-1].outputs[0]]


_UNKNOWN = object()  # a windows entry not worked out yet


def _call(step: _Step, args: tuple[Any, ...], allocate: Callable) -> Any:
    """``step``'s kernel on ``args``, with ``allocate`` where it takes it."""
    if step.wants_allocate:
        return step.fn(*args, allocate=allocate, **step.keywords)
    return step.fn(*args, **step.keywords)
