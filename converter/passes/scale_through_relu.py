"""Move a positive per-channel scale through a Relu into the Conv that reads it.

A BatchNormalization that no layer precedes (DenseNet's pre-activation blocks, after a Concat)
stays a per-channel ``Mul(s) → Add(t)`` (``batchnorm_to_scale_shift``). When a Relu and then a
Conv follow, the Mul can still go: Relu is positively homogeneous, so for ``s[c] > 0``::

    Relu(s·x + t) = s · Relu(x + t/s)

and a per-input-channel factor in front of a Conv is a factor on that channel's weights,
``W[o, j] · s[c(o, j)]`` with ``c(o, j) = g(o)·C/group + j`` (``g(o)`` the group of output channel
``o``). Zero padding is unaffected (``s · 0 = 0``), so the rewrite holds at the borders too::

    x ─► Mul(s) ─► Add(t) ─► Relu ─► Conv(W, b)     becomes     x ─► Add(t/s) ─► Relu ─► Conv(W·s, b)
    x ─► Mul(s) ─► Relu ─► Conv(W, b)                            x ─► Relu ─► Conv(W·s, b)

The Mul and its vector leave the graph (one per-channel vector fewer to store, one elementwise
pass fewer to run). A shift alone cannot move this way (``Relu(x + t) ≠ Relu(x) + t``), nor can a
scale with a zero or negative entry. Declines: a scale that is not constant, not per channel of
axis 1, or not finite and positive; an intermediate value read elsewhere or a graph output; a
Conv whose weight is not a foldable constant, or that reads the Relu as its weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from converter.passes.base import (
    RewriteRule,
    RulePass,
    add_initializer,
    attribute,
    constant,
    describe,
    foldable_weight,
    set_constant,
    sole_consumer,
)
from converter.passes.layers import FLOAT_TYPES


@dataclass
class _Chain:
    mul: ir.Node
    x: ir.Value  # the Mul's other input
    s: np.ndarray  # the Mul's constant as it is stored
    add: ir.Node | None
    t: np.ndarray | None
    relu: ir.Node
    conv: ir.Node


def _constant_operand(node: ir.Node) -> tuple[ir.Value, np.ndarray] | None:
    """(the other input, the constant) of a binary node with one constant input."""
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return None
    for position in (1, 0):
        value = constant(node.inputs[position])
        if value is not None and constant(node.inputs[1 - position]) is None:
            return node.inputs[1 - position], value
    return None


def _next(value: ir.Value, op_type: str) -> ir.Node | None:
    node = sole_consumer(value)
    return node if node is not None and node.op_type == op_type and node.domain == "" else None


def _match(node: ir.Node) -> _Chain | None:
    if node.op_type != "Mul" or node.domain != "":
        return None
    operands = _constant_operand(node)
    if operands is None:
        return None
    x, s = operands
    add = _next(node.outputs[0], "Add")
    t = None
    after = node.outputs[0]
    if add is not None:
        add_operands = _constant_operand(add)
        if add_operands is None:
            return None
        t = add_operands[1]
        after = add.outputs[0]
    relu = _next(after, "Relu")
    if relu is None:
        return None
    conv = _next(relu.outputs[0], "Conv")
    if conv is None:
        return None
    return _Chain(node, x, s, add, t, relu, conv)


def _per_channel(array: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """``array`` as (channels,) when it broadcasts along axis 1 of a rank-``rank`` value only."""
    if array.ndim > rank:
        return None
    padded = (1,) * (rank - array.ndim) + tuple(array.shape)
    if any(d != 1 for k, d in enumerate(padded) if k != 1) or padded[1] not in (1, channels):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)) if array.size > 1 else np.full(channels, array.item())


def _check(chain: _Chain) -> str | None:
    conv = chain.conv
    if len(conv.inputs) < 2 or conv.inputs[0] is not chain.relu.outputs[0]:
        return f"{describe(conv)} does not read the Relu as its input"
    weight = constant(conv.inputs[1])
    if weight is None or conv.inputs[1].dtype not in FLOAT_TYPES or weight.ndim < 3:
        return f"the weight of {describe(conv)} is not a float constant of rank >= 3"
    reason = foldable_weight(conv.inputs[1], conv)
    if reason:
        return reason
    if chain.s.dtype != weight.dtype or (chain.t is not None and chain.t.dtype != weight.dtype):
        return f"the constants' dtypes differ from the weight's {weight.dtype}"
    channels = weight.shape[1] * int(attribute(conv, "group", 1))
    s = _per_channel(chain.s, weight.ndim, channels)
    if s is None:
        return f"scale of shape {chain.s.shape} is not one value per input channel ({channels}) of {describe(conv)}"
    if not np.all(np.isfinite(s)) or not np.all(s > 0):
        return "the scale has entries that are zero, negative or not finite (Relu commutes with positive scales only)"
    if chain.t is not None and _per_channel(chain.t, weight.ndim, channels) is None:
        return f"shift of shape {chain.t.shape} is not one value per input channel ({channels})"
    return None


class MoveScaleThroughRelu(RewriteRule):
    name = "fold_scale_through_relu"

    def match(self, node: ir.Node) -> _Chain | None:
        return _match(node)

    def check(self, match: _Chain) -> str | None:
        return _check(match)

    def rewrite(self, match: _Chain) -> str:
        conv = match.conv
        weight_value = conv.inputs[1]
        weight = constant(weight_value)
        group = int(attribute(conv, "group", 1))
        channels = weight.shape[1] * group
        s = _per_channel(match.s, weight.ndim, channels).astype(np.float64)
        # Input channel of W[o, j]: group g(o) = o // (M / group), channel g(o)·C/group + j.
        per_group = weight.shape[0] // group
        rows = s.reshape(group, 1, weight.shape[1]).repeat(per_group, axis=1).reshape(weight.shape[0], weight.shape[1])
        scaled = weight.astype(np.float64) * rows.reshape(rows.shape + (1,) * (weight.ndim - 2))
        set_constant(weight_value, scaled.astype(weight.dtype))
        graph = match.mul.graph
        if match.add is not None:
            t = _per_channel(match.t, weight.ndim, channels).astype(np.float64) / s
            shape = (channels,) + (1,) * (weight.ndim - 2)
            base = match.add.name or "Add"
            shift = add_initializer(graph, t.astype(weight.dtype).reshape(shape),
                                    self.context.unique_name(f"{base}_shift"))
            match.add.replace_input_with(0, match.x)
            match.add.replace_input_with(1, shift)
        else:
            match.relu.replace_input_with(0, match.x)
        graph.remove(match.mul, safe=True)
        return f"moved the scale of {describe(match.mul)} through {describe(match.relu)} into {describe(conv)}"


fold_scale_through_relu = RulePass("fold_scale_through_relu", [MoveScaleThroughRelu()], __doc__ or "")
