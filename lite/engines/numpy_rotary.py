"""The numpy engine's rotary embedding fusion: ``x·cos + rotate_half(x)·sin`` as one step.

torch.export writes Llama's rotary position embedding (applied to the queries and the keys of
every layer) as seven nodes::

    x ─┬──────────────────────────────────────────────► Mul(·, cos) ─┐
       ├─► Slice(last axis, half:) ─► Neg ─┐                         ├─► Add ─► y
       └─► Slice(last axis, :half) ────────┴─► Concat(-1) ─► Mul(·, sin) ─┘

The fused step computes the same products and sum (the rotated half written into one buffer
instead of sliced, negated and concatenated). The slices must split the last axis at one
point, given by constants; inputs it does not handle (an odd width, another element type, cos
or sin that broadcast x to a larger shape) run the original kernels one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, Graph, broadcasts_to, plain, run_steps

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

_END = 2**62  # an end at or past this is the end of the axis


def fuse_rotary_embedding(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every rotary embedding (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "Concat" or not plain(step, 2):
            continue
        match, _reason = match_rotary_embedding(step, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match.block):
            continue
        last = match.block[-1]
        fused[id(last)] = replace(
            last, fn=match, inputs=[match.x, match.cos, match.sin], outputs=[last.outputs[0]],
            attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
            wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
        dropped.update(id(s) for s in match.block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _half(step: _Step | None, constants: dict[int, Any]) -> tuple[int, int, int, int] | None:
    """(x, start, end, axis) of a Slice of x by constant starts, ends and axes (steps 1), or None."""
    if step is None or not 4 <= len(step.inputs) <= 5:
        return None
    values = [constants.get(index) for index in step.inputs[1:]]
    if any(not isinstance(value, np.ndarray) or value.size != 1 or value.dtype.kind != "i" for value in values):
        return None
    start, end, axis = (int(value.reshape(())) for value in values[:3])
    if len(values) == 4 and int(values[3].reshape(())) != 1:
        return None
    return step.inputs[0], start, end, axis


def _slice_producing(index: int, graph: Graph) -> _Step | None:
    step = graph.producer_of.get(index)
    return graph.producer(index, "Slice", len(step.inputs)) if step is not None else None


def match_rotary_embedding(concat: _Step, graph: Graph, constants: dict[int, Any]):
    """The :class:`FusedRotaryEmbedding` around ``concat``, or None; and the reason it is not one."""
    if concat.attributes.get("axis") != -1:
        return None, "not a concatenation along the last axis"
    neg = graph.producer(concat.inputs[0], "Neg", 1)
    second = _slice_producing(neg.inputs[0], graph) if neg is not None else None
    first = _slice_producing(concat.inputs[1], graph)
    upper, lower = _half(second, constants), _half(first, constants)
    if upper is None or lower is None or upper[0] != lower[0] or upper[3] != lower[3]:
        return None, "not the negated second half of a tensor's axis before its first half"
    x, start, half, axis = lower
    if start != 0 or half <= 0 or upper[1] != half or upper[2] < _END:
        return None, "the slices are not [0, h) and [h, end)"
    sin_product = graph.only_reader(concat.outputs[0], "Mul", 2, None)
    add = graph.only_reader(sin_product.outputs[0], "Add", 2, None, first=False) if sin_product is not None else None
    if add is None:
        return None, "the rotated half is not multiplied by sin and added"
    cos_product = graph.producer(add.inputs[0] if add.inputs[1] == sin_product.outputs[0] else add.inputs[1], "Mul", 2)
    if cos_product is None or cos_product.inputs[0] != x or cos_product.inputs[1] == x or sin_product.inputs[1] == x:
        return None, "x is not multiplied by cos"
    block = [cos_product, first, second, neg, concat, sin_product, add]
    block.sort(key=lambda step: graph.position[id(step)])
    if block[-1] is not add:
        return None, "the sum does not run last"
    return FusedRotaryEmbedding(block, x, cos_product.inputs[1], sin_product.inputs[1], half, axis, constants), ""


class FusedRotaryEmbedding:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], x: int, cos: int, sin: int, half: int, axis: int,
                 constants: dict[int, Any]) -> None:
        self.block = block
        self.x = x
        self.cos = cos
        self.sin = sin
        self.half = half
        self.axis = axis
        self.constants = constants

    def __call__(self, x: Any, cos: Any, sin: Any, allocate: Callable = np.empty) -> np.ndarray:
        half = self.half
        if (type(x) is not np.ndarray or type(cos) is not np.ndarray or type(sin) is not np.ndarray
                or x.dtype not in FLOATS or cos.dtype != x.dtype or sin.dtype != x.dtype or not x.ndim
                or x.shape[-1] != 2 * half or self.axis not in (-1, x.ndim - 1)
                or not broadcasts_to(cos.shape, x.shape) or not broadcasts_to(sin.shape, x.shape)):
            return self._in_turn(x, cos, sin, allocate)
        rotated = np.empty(x.shape, x.dtype)
        np.negative(x[..., half:], out=rotated[..., :half])
        rotated[..., half:] = x[..., :half]
        np.multiply(rotated, sin, out=rotated)
        y = np.multiply(x, cos)
        return np.add(y, rotated, out=y)

    def _in_turn(self, x: Any, cos: Any, sin: Any, allocate: Callable) -> Any:
        return run_steps(self.block, {self.x: x, self.cos: cos, self.sin: sin}, self.constants, allocate)
