"""Move a positive per-channel scale through a Relu into the layer that reads it.

A BatchNormalization that no layer precedes (DenseNet's pre-activation blocks, after a Concat)
stays a per-channel ``Mul(s) → Add(t)`` (``batchnorm_to_scale_shift``). When a Relu and then a
Conv follow, the Mul can still go: Relu is positively homogeneous, so for ``s[c] > 0``::

    Relu(s·x + t) = s · Relu(x + t/s)

and a per-input-channel factor in front of a Conv is a factor on that channel's weights,
``W[o, j] · s[c(o, j)]`` with ``c(o, j) = g(o)·C/group + j`` (``g(o)`` the group of output channel
``o``). Zero padding is unaffected (``s · 0 = 0``), so the rewrite holds at the borders too::

    x ─► Mul(s) ─► Add(t) ─► Relu ─► Conv(W, b)     becomes     x ─► Add(t/s) ─► Relu ─► Conv(W·s, b)
    x ─► Mul(s) ─► Relu ─► Conv(W, b)                            x ─► Relu ─► Conv(W·s, b)

A classifier head in between (a ReduceMean or GlobalAveragePool over the spatial axes, then a
Reshape or Flatten to (N, C)) is linear per channel and keeps the channels in place, so the scale
also reaches a Gemm: input feature ``k`` of ``A`` scales row ``k`` of ``B`` (column ``k`` with
``transB``)::

    Mul(s) ─► Add(t) ─► Relu ─► ReduceMean ─► Reshape ─► Gemm(B)   becomes   Add(t/s) ─► Relu ─► ... ─► Gemm(s·B)

The Mul and its vector leave the graph (one per-channel vector fewer to store, one elementwise
pass fewer to run). A shift alone cannot move this way (``Relu(x + t) ≠ Relu(x) + t``), nor can a
scale with a zero or negative entry. Declines: a scale that is not constant, not per channel of
axis 1, or not finite and positive; an intermediate value read elsewhere or a graph output; a
layer whose weight is not a foldable constant, or that reads the chain as its weight.
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
from converter.passes.layers import FLOAT_TYPES, along_axis

_HEAD_OPS = ("ReduceMean", "GlobalAveragePool", "Reshape", "Flatten")


@dataclass
class _Chain:
    mul: ir.Node
    x: ir.Value  # the Mul's other input
    s: np.ndarray  # the Mul's constant as it is stored
    add: ir.Node | None
    t: np.ndarray | None
    relu: ir.Node
    head: list[ir.Node]  # pooling and flattening between the Relu and the layer
    layer: ir.Node  # Conv or Gemm


def _constant_operand(node: ir.Node) -> tuple[ir.Value, np.ndarray] | None:
    """(the other input, the constant) of a binary node with one constant input."""
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return None
    for position in (1, 0):
        value = constant(node.inputs[position])
        if value is not None and constant(node.inputs[1 - position]) is None:
            return node.inputs[1 - position], value
    return None


def _next(value: ir.Value, op_types: tuple[str, ...]) -> ir.Node | None:
    node = sole_consumer(value)
    return node if node is not None and node.op_type in op_types and node.domain == "" else None


def _match(node: ir.Node) -> _Chain | None:
    if node.op_type != "Mul" or node.domain != "":
        return None
    operands = _constant_operand(node)
    if operands is None:
        return None
    x, s = operands
    add = _next(node.outputs[0], ("Add",))
    t = None
    after = node.outputs[0]
    if add is not None:
        add_operands = _constant_operand(add)
        if add_operands is None:
            return None
        t = add_operands[1]
        after = add.outputs[0]
    relu = _next(after, ("Relu",))
    if relu is None:
        return None
    head: list[ir.Node] = []
    layer = _next(relu.outputs[0], ("Conv", "Gemm", *_HEAD_OPS))
    while layer is not None and layer.op_type in _HEAD_OPS and len(head) < 4:
        head.append(layer)
        layer = _next(layer.outputs[0], ("Conv", "Gemm", *_HEAD_OPS))
    if layer is None or layer.op_type in _HEAD_OPS:
        return None
    return _Chain(node, x, s, add, t, relu, head, layer)


def _head_reason(node: ir.Node, rank: int) -> str | None:
    """Why ``node`` (between the Relu and the layer) does not keep each channel on axis 1 alone."""
    shape = node.inputs[0].shape
    if node.op_type == "GlobalAveragePool":
        return None
    if node.op_type == "ReduceMean":
        axes = constant(node.inputs[1]) if len(node.inputs) > 1 else attribute(node, "axes", None)
        if axes is None or attribute(node, "keepdims", 1) != 1:
            return f"{describe(node)} has no constant axes or drops dims"
        if any(int(a) % rank in (0, 1) for a in np.asarray(axes).reshape(-1)):
            return f"{describe(node)} averages over the batch or channel axis"
        return None
    # Reshape, Flatten: (N, C, 1, ...) to (N, C) moves no channel.
    out = node.outputs[0].shape
    if node.op_type == "Flatten" and attribute(node, "axis", 1) != 1:
        return f"{describe(node)} does not flatten from axis 1"
    if shape is None or out is None or len(out) != 2 or any(d != 1 for d in list(shape)[2:]):
        return f"{describe(node)} is not a (N, C, 1, ...) to (N, C) reshape (shapes unknown or other)"
    if out[1] != shape[1]:
        return f"{describe(node)} gives {out[1]} features from {shape[1]} channels"
    return None


def _channels(layer: ir.Node, weight: np.ndarray) -> int:
    if layer.op_type == "Conv":
        return weight.shape[1] * int(attribute(layer, "group", 1))
    return weight.shape[0] if not attribute(layer, "transB", 0) else weight.shape[1]


def _check(chain: _Chain) -> str | None:
    layer = chain.layer
    source = chain.head[-1].outputs[0] if chain.head else chain.relu.outputs[0]
    if len(layer.inputs) < 2 or layer.inputs[0] is not source:
        return f"{describe(layer)} does not read the chain as its input"
    weight = constant(layer.inputs[1])
    wanted_rank = 2 if layer.op_type == "Gemm" else 3
    if weight is None or layer.inputs[1].dtype not in FLOAT_TYPES or weight.ndim < wanted_rank:
        return f"the weight of {describe(layer)} is not a float constant of rank >= {wanted_rank}"
    if layer.op_type == "Gemm" and (weight.ndim != 2 or attribute(layer, "transA", 0)):
        return f"{describe(layer)} has transA or a weight that is not a matrix"
    reason = foldable_weight(layer.inputs[1], layer)
    if reason:
        return reason
    if chain.s.dtype != weight.dtype or (chain.t is not None and chain.t.dtype != weight.dtype):
        return f"the constants' dtypes differ from the weight's {weight.dtype}"
    rank = len(chain.x.shape) if chain.x.shape is not None else (weight.ndim if layer.op_type == "Conv" else None)
    if rank is None or rank < 2:
        return f"the rank of {chain.x.name!r} is unknown or below 2"
    for node in chain.head:
        reason = _head_reason(node, rank)
        if reason:
            return reason
    channels = _channels(layer, weight)
    s = along_axis(chain.s, rank, 1, channels)
    if s is None:
        return f"scale of shape {chain.s.shape} is not one value per input channel ({channels}) of {describe(layer)}"
    if not np.all(np.isfinite(s)) or not np.all(s > 0):
        return "the scale has entries that are zero, negative or not finite (Relu commutes with positive scales only)"
    if chain.t is not None and along_axis(chain.t, rank, 1, channels) is None:
        return f"shift of shape {chain.t.shape} is not one value per input channel ({channels})"
    with np.errstate(all="ignore"):  # a tiny scale can push t/s or W·s out of the weight's range
        moved = [_scale_inputs(layer, weight, s.astype(np.float64)).astype(weight.dtype)]
        if chain.t is not None:
            moved.append((along_axis(chain.t, rank, 1, channels).astype(np.float64) / s).astype(weight.dtype))
    if not all(np.all(np.isfinite(value)) for value in moved):
        return f"moving the scale overflows {weight.dtype} (t/s or the scaled weights are not finite)"
    return None


def _scale_inputs(layer: ir.Node, weight: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The weight with input channel ``c`` of the layer multiplied by ``s[c]`` (float64)."""
    w = weight.astype(np.float64)
    if layer.op_type == "Gemm":
        return w * (s[None, :] if attribute(layer, "transB", 0) else s[:, None])
    # Conv: input channel of W[o, j] is g(o)·C/group + j, with g(o) = o // (M / group).
    group = int(attribute(layer, "group", 1))
    per_group = weight.shape[0] // group
    rows = s.reshape(group, 1, weight.shape[1]).repeat(per_group, axis=1).reshape(weight.shape[0], weight.shape[1])
    return w * rows.reshape(rows.shape + (1,) * (weight.ndim - 2))


class MoveScaleThroughRelu(RewriteRule):
    name = "fold_scale_through_relu"

    def match(self, node: ir.Node) -> _Chain | None:
        return _match(node)

    def check(self, match: _Chain) -> str | None:
        return _check(match)

    def rewrite(self, match: _Chain) -> str:
        layer = match.layer
        weight_value = layer.inputs[1]
        weight = constant(weight_value)
        channels = _channels(layer, weight)
        rank = len(match.x.shape) if match.x.shape is not None else weight.ndim
        s = along_axis(match.s, rank, 1, channels).astype(np.float64)
        set_constant(weight_value, _scale_inputs(layer, weight, s).astype(weight.dtype))
        graph = match.mul.graph
        if match.add is not None:
            old = along_axis(match.t, rank, 1, channels)
            t = (old.astype(np.float64) / s).astype(weight.dtype)
            position = 0 if match.add.inputs[0] is match.mul.outputs[0] else 1
            match.add.replace_input_with(position, match.x)
            if not np.array_equal(t, old):
                # Unchanged shifts (zeros, or scales of 1) keep their constant, which may be shared.
                shape = (channels,) + (1,) * (rank - 2)
                base = match.add.name or "Add"
                shift = add_initializer(graph, t.reshape(shape), self.context.unique_name(f"{base}_shift"))
                match.add.replace_input_with(1 - position, shift)
        else:
            match.relu.replace_input_with(0, match.x)
        graph.remove(match.mul, safe=True)
        return f"moved the scale of {describe(match.mul)} through {describe(match.relu)} into {describe(layer)}"


fold_scale_through_relu = RulePass("fold_scale_through_relu", [MoveScaleThroughRelu()], __doc__ or "")
