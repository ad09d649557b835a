"""fuse_activation: an activation right after Conv, Gemm or MatMul becomes an attribute of it.

Lite-style fused activation (cf. TFLite's ``fused_activation_function`` and MindSpore Lite's
``activation_type``): the node gets

- ``fused_activation`` (STRING): one of the activations of :mod:`lite.format.fused_activation`
  (Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Silu);
- ``fused_activation_params`` (FLOATS), when the activation has parameters: the ONNX node's
  attributes that vocabulary lists (LeakyRelu ``[alpha]``, HardSigmoid ``[alpha, beta]``), or
  Clip ``[min, max]`` (±inf for a missing bound);

and the runtime applies the activation to the node's output. Silu is matched as ``x·sigmoid(x)``::

    y = Conv(x)                                  y = Conv(x, fused_activation="Silu")
    Mul(y, Sigmoid(y))             becomes

When the model is written as ONNX, the activation is expanded back into its own node, so ONNX
Runtime sees standard ops (``converter.onnx_export``). Declines: the layer's output is read by
anything else or is a graph output, Clip bounds that are not constants, a layer already fused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import onnx_ir as ir

from converter.passes.base import (
    RewriteRule,
    RulePass,
    attribute,
    constant,
    describe,
    replace_output,
    sole_consumer,
)
from lite.format.fused_activation import ACTIVATIONS, ATTRIBUTE, PARAMS_ATTRIBUTE

FUSABLE_LAYERS = ("Conv", "Gemm", "MatMul")
# Activations that are one ONNX node of the same name (Silu is matched as Mul(x, Sigmoid(x))).
SIMPLE = {name for name, activation in ACTIVATIONS.items() if activation.is_onnx_op}


@dataclass
class _Fusion:
    layer: ir.Node
    activation: str
    params: list[float]
    removed: list[ir.Node] = field(default_factory=list)  # activation node(s), last one produces the result
    reason: str | None = None


class FuseActivation(RewriteRule):
    name = "fuse_activation"

    def match(self, node: ir.Node) -> _Fusion | None:
        if node.domain != "":
            return None
        if node.op_type in SIMPLE:
            return self._simple(node)
        if node.op_type == "Mul" and len(node.inputs) == 2:
            return self._silu(node)
        return None

    def _producer(self, value: ir.Value | None) -> ir.Node | None:
        node = None if value is None else value.producer()
        if node is None or node.domain != "" or node.op_type not in FUSABLE_LAYERS:
            return None
        return node

    def _simple(self, node: ir.Node) -> _Fusion | None:
        layer = self._producer(node.inputs[0])
        if layer is None:
            return None
        fusion = _Fusion(layer, node.op_type, [], [node])
        if node.op_type == "Clip":
            fusion.params, fusion.reason = _clip_bounds(node)
        else:
            fusion.params = ACTIVATIONS[node.op_type].params_from(partial(attribute, node))
        return fusion

    def _silu(self, node: ir.Node) -> _Fusion | None:
        for position in (0, 1):
            x, gate = node.inputs[position], node.inputs[1 - position]
            sigmoid = None if gate is None else gate.producer()
            if sigmoid is None or sigmoid.op_type != "Sigmoid" or sigmoid.domain != "" or sigmoid.inputs[0] is not x:
                continue
            layer = self._producer(x)
            if layer is None:
                continue
            fusion = _Fusion(layer, "Silu", [], [sigmoid, node])
            if sole_consumer(gate) is not node:
                fusion.reason = "the Sigmoid's output is also read elsewhere"
            return fusion
        return None

    def check(self, fusion: _Fusion) -> str | None:
        if fusion.reason:
            return fusion.reason
        layer = fusion.layer
        if layer.attributes.get(ATTRIBUTE) is not None:
            return f"{describe(layer)} already has a fused activation"
        output = layer.outputs[0]
        if output.is_graph_output():
            return f"the output of {describe(layer)} is a graph output"
        readers = {use.node for use in output.uses()}
        if readers != set(fusion.removed[-1:]) | ({fusion.removed[0]} if fusion.activation == "Silu" else set()):
            return f"the output of {describe(layer)} is also read by {len(readers) - len(fusion.removed)} other node(s)"
        return None

    def rewrite(self, fusion: _Fusion) -> str:
        layer = fusion.layer
        layer.attributes[ATTRIBUTE] = ir.AttrString(ATTRIBUTE, fusion.activation)
        if fusion.params:
            layer.attributes[PARAMS_ATTRIBUTE] = ir.AttrFloat32s(PARAMS_ATTRIBUTE, fusion.params)
        result = fusion.removed[-1].outputs[0]
        replace_output(result, layer.outputs[0])
        layer.graph.remove(fusion.removed, safe=True)
        return f"fused {fusion.activation} ({describe(fusion.removed[-1])}) into {describe(layer)}"


def _clip_bounds(node: ir.Node) -> tuple[list[float], str | None]:
    if len(node.inputs) > 1:  # opset >= 11: bounds are optional inputs
        bounds = []
        for position, default in ((1, -np.inf), (2, np.inf)):
            value = node.inputs[position] if len(node.inputs) > position else None
            if value is None:
                bounds.append(float(default))
                continue
            array = constant(value)
            if array is None:
                return [], f"Clip bound {value.name!r} is not a constant"
            bounds.append(float(np.asarray(array).reshape(-1)[0]))
        return bounds, None
    return [float(attribute(node, "min", -3.4028234663852886e38)), float(attribute(node, "max", 3.4028234663852886e38))], None


fuse_activation = RulePass("fuse_activation", [FuseActivation()], __doc__ or "")
