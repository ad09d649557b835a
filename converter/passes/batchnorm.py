"""BatchNormalization at inference: fold it into the layer before it, or make it one Mul + Add.

Inference-mode BatchNormalization (https://onnx.ai/onnx/operators/onnx__BatchNormalization.html)
is an affine map per channel ``c`` (axis 1)::

    y = scale[c] · (x − mean[c]) / sqrt(var[c] + epsilon) + B[c]
      = s[c] · x + t[c]          with  s = scale / sqrt(var + epsilon),  t = B − mean · s

fold_batchnorm
    When ``x`` is the output of a layer whose output channels lie on axis 1 (see ``layers.py``),
    the map moves into the layer's weights and bias and the BatchNormalization disappears::

        x ──Conv(W, b)──► BN ──►        becomes        x ──Conv(W·s, b·s + t)──►
        x ──Gemm(B, C)──► BN ──►                       x ──Gemm(B·s, C·s + t)──►
        x ──MatMul(B)──Add(b)──► BN ──►                x ──MatMul(B·s)──Add(b·s + t)──►

    MatMul qualifies only with a 2-D (N, C) output (a dense layer), where axis 1 is the feature
    axis; without an Add, one is created for ``t``. Declines: training mode, parameters that
    are not constants, the layer's output read elsewhere, weights that are graph inputs or shared.

batchnorm_to_scale_shift
    A BatchNormalization with nothing to fold into becomes ``Mul(x, s) → Add(t)`` with ``s`` and
    ``t`` shaped (C, 1, ..., 1) to broadcast over axis 1 (rank from shape inference).
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
    replace_output,
    sole_consumer,
)
from converter.passes.layers import Layer, check_layer, find_layer, scale, shift


@dataclass
class BatchNorm:
    node: ir.Node
    s: np.ndarray  # float64, per channel
    t: np.ndarray


def _match_batchnorm(node: ir.Node) -> ir.Node | None:
    if node.op_type == "BatchNormalization" and node.domain == "":
        return node
    return None


def _inference_form(node: ir.Node) -> tuple[BatchNorm | None, str | None]:
    """The (s, t) of an inference-mode BatchNormalization, or the reason it has none."""
    if attribute(node, "training_mode", 0):
        return None, "training_mode is 1"
    if not attribute(node, "spatial", 1):
        return None, "spatial=0 (per-element statistics) is not an affine map per channel"
    for extra in node.outputs[1:]:
        if extra.uses() or extra.is_graph_output():
            return None, f"running statistic output {extra.name!r} is read"
    params = [constant(v) for v in node.inputs[1:5]]
    if len(params) < 4 or any(p is None for p in params):
        return None, "scale, B, mean and var are not all constants"
    gamma, beta, mean, var = (np.asarray(p, dtype=np.float64).reshape(-1) for p in params)
    lengths = [len(gamma), len(beta), len(mean), len(var)]
    if len(set(lengths)) != 1:
        return None, f"scale, B, mean and var have {lengths} elements; each needs one per channel"
    epsilon = attribute(node, "epsilon", 1e-5)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        return None, f"epsilon is {epsilon!r}, not a number"
    epsilon = float(epsilon)
    s = gamma / np.sqrt(var + epsilon)
    return BatchNorm(node, s, beta - mean * s), None


@dataclass
class _Fold:
    batchnorm: ir.Node
    layer: Layer


class FoldBatchNormIntoLayer(RewriteRule):
    name = "fold_batchnorm"

    def match(self, node: ir.Node) -> _Fold | None:
        if _match_batchnorm(node) is None or not node.inputs:
            return None
        layer = find_layer(node.inputs[0])
        return None if layer is None else _Fold(node, layer)

    def check(self, match: _Fold) -> str | None:
        form, reason = _inference_form(match.batchnorm)
        if reason:
            return reason
        layer = match.layer
        if sole_consumer(layer.output) is not match.batchnorm:
            return f"the output of {describe(layer.node)} is also read elsewhere"
        if layer.node.op_type == "MatMul" and layer.rank != 2:
            return (
                f"{describe(layer.node)} output has rank {layer.rank}: BatchNormalization's channel axis 1 "
                "is not the feature axis"
            )
        if len(form.s) != layer.channels:
            return f"{len(form.s)} BatchNormalization channels vs {layer.channels} output channels"
        return check_layer(layer)

    def rewrite(self, match: _Fold) -> str:
        form, _ = _inference_form(match.batchnorm)
        layer = match.layer
        scale(layer, form.s)
        result = shift(layer, form.t, self.context)
        bn = match.batchnorm
        replace_output(bn.outputs[0], result)
        bn.graph.remove(bn, safe=True)
        return f"folded {describe(bn)} into {describe(layer.node)}"


class BatchNormToScaleShift(RewriteRule):
    name = "batchnorm_to_scale_shift"

    def match(self, node: ir.Node) -> ir.Node | None:
        return _match_batchnorm(node)

    def check(self, node: ir.Node) -> str | None:
        _, reason = _inference_form(node)
        if reason:
            return reason
        x = node.inputs[0]
        if x.shape is None:
            return f"the rank of input {x.name!r} is unknown (shape inference could not tell)"
        if len(x.shape) < 2:
            return f"input {x.name!r} has rank {len(x.shape)} < 2"
        if x.dtype is None:
            return f"the element type of input {x.name!r} is unknown"
        return None

    def rewrite(self, node: ir.Node) -> str:
        form, _ = _inference_form(node)
        x = node.inputs[0]
        graph = node.graph
        dtype = x.dtype.numpy()
        channel_shape = (len(form.s),) + (1,) * (len(x.shape) - 2)
        base = node.name or "BatchNormalization"
        s = add_initializer(graph, form.s.astype(dtype).reshape(channel_shape), self.context.unique_name(f"{base}_scale"))
        t = add_initializer(graph, form.t.astype(dtype).reshape(channel_shape), self.context.unique_name(f"{base}_shift"))
        mul = ir.node("Mul", [x, s], name=self.context.unique_name(f"{base}_mul"))
        add = ir.node("Add", [mul.outputs[0], t], name=self.context.unique_name(f"{base}_add"))
        for value in (mul.outputs[0], add.outputs[0]):
            value.dtype = x.dtype
            value.shape = ir.Shape(list(x.shape))
        graph.insert_before(node, [mul, add])
        replace_output(node.outputs[0], add.outputs[0])
        graph.remove(node, safe=True)
        return f"{describe(node)} → Mul + Add"


fold_batchnorm = RulePass("fold_batchnorm", [FoldBatchNormIntoLayer()], __doc__ or "")
batchnorm_to_scale_shift = RulePass("batchnorm_to_scale_shift", [BatchNormToScaleShift()], __doc__ or "")
