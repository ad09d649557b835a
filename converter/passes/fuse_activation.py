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

and HardSwish also in the forms exporters write it without the operator (PaddlePaddle's
``hard_swish``, TensorFlow's ``x * relu6(x + 3) / 6``, any model before opset 14, which has no
HardSwish)::

    y · Clip(y + 3, 0, 6) / 6      y · (Clip(y + 3, 0, 6) / 6)      y · HardSigmoid(y; 1/6, 1/2)

(a division by 6 or a product with 1/6, operands in either order). Four elementwise passes over
the layer's output become the one the layer's epilogue makes.

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
    readers: set[ir.Node] | None = None  # the nodes that read the layer's output (default: the last one)


class FuseActivation(RewriteRule):
    name = "fuse_activation"

    def match(self, node: ir.Node) -> _Fusion | None:
        if node.domain != "":
            return None
        if node.op_type in SIMPLE:
            return self._simple(node)
        if node.op_type in ("Mul", "Div") and len(node.inputs) == 2:
            fusion = self._hard_swish(node)
            if fusion is None and node.op_type == "Mul":
                fusion = self._silu(node)
            return fusion
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
            fusion = _Fusion(layer, "Silu", [], [sigmoid, node], readers={sigmoid, node})
            if sole_consumer(gate) is not node:
                fusion.reason = "the Sigmoid's output is also read elsewhere"
            return fusion
        return None

    def _hard_swish(self, node: ir.Node) -> _Fusion | None:
        """``node`` ending a HardSwish written without the operator (module docstring)."""
        # y · Clip(y + 3, 0, 6), then / 6: node is the division (or the product with 1/6).
        product = _sixth(node)
        if product is not None and product.producer() is not None and product.producer().op_type == "Mul":
            mul = product.producer()
            for position in (0, 1):
                y, gate = mul.inputs[position], mul.inputs[1 - position]
                steps = _relu6_of_shift(gate, y)
                layer = self._producer(y)
                if steps is not None and layer is not None:
                    return self._hard_swish_fusion(layer, [*steps, mul, node], {steps[0], mul})
        if node.op_type != "Mul":
            return None
        # y · (Clip(y + 3, 0, 6) / 6), or y · HardSigmoid(y; 1/6, 1/2): node is the product.
        for position in (0, 1):
            y, gate = node.inputs[position], node.inputs[1 - position]
            layer = self._producer(y)
            source = None if gate is None else gate.producer()
            if layer is None or source is None or source.domain != "":
                continue
            if source.op_type == "HardSigmoid" and source.inputs[0] is y:
                alpha, beta = attribute(source, "alpha", 0.2), attribute(source, "beta", 0.5)
                if np.isclose(alpha, 1 / 6, rtol=1e-6) and np.isclose(beta, 0.5, rtol=1e-6):
                    return self._hard_swish_fusion(layer, [source, node], {source, node})
                continue
            steps = _relu6_of_shift(_sixth(source), y)
            if steps is not None:
                return self._hard_swish_fusion(layer, [*steps, source, node], {steps[0], node})
        return None

    @staticmethod
    def _hard_swish_fusion(layer: ir.Node, removed: list[ir.Node], readers: set[ir.Node]) -> _Fusion:
        fusion = _Fusion(layer, "HardSwish", [], removed, readers=readers)
        for step in removed[:-1]:
            if sole_consumer(step.outputs[0]) is None:
                fusion.reason = f"the output of {describe(step)} is also read elsewhere"
                break
        return fusion

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
        expected = fusion.readers if fusion.readers is not None else {fusion.removed[-1]}
        if readers != expected:
            return f"the output of {describe(layer)} is also read by {len(readers - expected)} other node(s)"
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


def _scalar(value: ir.Value | None) -> float | None:
    """The number a one-element constant holds (which cannot broadcast the other operand to a
    larger shape), else None."""
    array = constant(value)
    if array is None or array.size != 1 or array.dtype.kind not in "fiu":
        return None
    return float(np.asarray(array, dtype=np.float64).reshape(-1)[0])


def _sixth(node: ir.Node | None) -> ir.Value | None:
    """What ``node`` divides by 6 (``v / 6``, ``v · (1/6)``, ``(1/6) · v``), else None."""
    if node is None or node.domain != "" or len(node.inputs) != 2:
        return None
    if node.op_type == "Div":
        divisor = _scalar(node.inputs[1])
        return node.inputs[0] if divisor is not None and np.isclose(divisor, 6.0, rtol=1e-6) else None
    if node.op_type == "Mul":
        for position in (0, 1):
            factor = _scalar(node.inputs[1 - position])
            if factor is not None and np.isclose(factor, 1 / 6, rtol=1e-6):
                return node.inputs[position]
    return None


def _relu6_of_shift(value: ir.Value | None, y: ir.Value | None) -> list[ir.Node] | None:
    """[Add, Clip] when ``value`` is ``Clip(y + 3, 0, 6)`` (the Add's operands in either order)."""
    clip = None if value is None or y is None else value.producer()
    if clip is None or clip.op_type != "Clip" or clip.domain != "" or not clip.inputs:
        return None
    bounds, reason = _clip_bounds(clip)
    if reason is not None or bounds != [0.0, 6.0]:
        return None
    add = None if clip.inputs[0] is None else clip.inputs[0].producer()
    if add is None or add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
        return None
    for position in (0, 1):
        shift = _scalar(add.inputs[1 - position])
        if add.inputs[position] is y and shift is not None and shift == 3.0:
            return [add, clip]
    return None


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
