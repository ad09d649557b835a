"""Fold a per-channel constant Add or Mul that follows a layer into the layer's weights.

fold_add_into_bias
    ``Add(Conv(x, W, b), c)`` with ``c`` constant per output channel (a scalar, (M,), (M, 1, 1),
    (1, M, 1, 1)...) becomes ``Conv(x, W, b + c)``; the same for ConvTranspose and for Gemm
    (into ``C``). MatMul + Add is left alone: it already is the dense layer's canonical form,
    which BatchNormalization folding and the runtimes understand.

fold_mul_into_weights
    ``Mul(layer(x), c)`` with ``c`` constant per output channel becomes the layer with weights
    and bias scaled by ``c`` (linearity: ``c·(W∗x + b) = (c·W)∗x + c·b``), for Conv,
    ConvTranspose, Gemm and MatMul(+Add).

Both decline when ``c`` would broadcast along another axis or enlarge the output, when the
layer's output is read by other nodes too, and when the weights are graph inputs or shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from converter.passes.base import RewriteRule, RulePass, constant, describe, replace_output, sole_consumer
from converter.passes.layers import Layer, check_layer, find_layer, per_channel, scale, shift


@dataclass
class _Affine:
    node: ir.Node  # the Add or Mul
    layer: Layer
    value: np.ndarray  # the constant operand


def _match(node: ir.Node, op_type: str, with_matmul: bool) -> _Affine | None:
    if node.op_type != op_type or node.domain != "" or len(node.inputs) != 2:
        return None
    for position in (0, 1):
        value = constant(node.inputs[1 - position])
        if value is None:
            continue
        layer = find_layer(node.inputs[position], with_matmul=with_matmul)
        if layer is not None:
            return _Affine(node, layer, value)
    return None


def _check(match: _Affine) -> str | None:
    layer = match.layer
    if sole_consumer(layer.output) is not match.node:
        return f"the output of {describe(layer.node)} is also read elsewhere"
    if match.value.dtype != constant(layer.weight).dtype:
        return f"constant dtype {match.value.dtype} differs from the weight's {constant(layer.weight).dtype}"
    if per_channel(match.value, layer) is None:
        return (
            f"constant of shape {match.value.shape} is not one value per output channel "
            f"({layer.channels}) of {describe(layer.node)}"
        )
    return check_layer(layer)


class FoldAddIntoBias(RewriteRule):
    name = "fold_add_into_bias"

    def match(self, node: ir.Node) -> _Affine | None:
        return _match(node, "Add", with_matmul=False)

    def check(self, match: _Affine) -> str | None:
        return _check(match)

    def rewrite(self, match: _Affine) -> str:
        result = shift(match.layer, per_channel(match.value, match.layer), self.context)
        replace_output(match.node.outputs[0], result)
        match.node.graph.remove(match.node, safe=True)
        return f"folded {describe(match.node)} into the bias of {describe(match.layer.node)}"


class FoldMulIntoWeights(RewriteRule):
    name = "fold_mul_into_weights"

    def match(self, node: ir.Node) -> _Affine | None:
        return _match(node, "Mul", with_matmul=True)

    def check(self, match: _Affine) -> str | None:
        return _check(match)

    def rewrite(self, match: _Affine) -> str:
        scale(match.layer, per_channel(match.value, match.layer))
        replace_output(match.node.outputs[0], match.layer.output)
        match.node.graph.remove(match.node, safe=True)
        return f"folded {describe(match.node)} into the weights of {describe(match.layer.node)}"


fold_add_into_bias = RulePass("fold_add_into_bias", [FoldAddIntoBias()], __doc__ or "")
fold_mul_into_weights = RulePass("fold_mul_into_weights", [FoldMulIntoWeights()], __doc__ or "")
