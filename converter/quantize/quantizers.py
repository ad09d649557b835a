"""Which ops are quantized, and how: a table keyed by op type (unknown ops stay in float).

Each quantizer is the *check* of a pattern → check → rewrite rule whose pattern is the op type:
``check(node, graph, config)`` returns a :class:`Request` naming the node's roles (activation
inputs, weights with their channel axis, an int32 bias, what happens to the output), or the
reason the node stays in float, which the report lists. The static rewrite
(:mod:`converter.quantize.static`) then places QuantizeLinear/DequantizeLinear pairs so that ONNX
Runtime's QDQ selectors find the groups its integer kernels run (DQ → Conv → Q becomes
QLinearConv, DQ → Add → Q QLinearAdd, DQ → MaxPool → Q a uint8 MaxPool, ...).

Output policies:

``always``   the output is quantized (ONNX Runtime needs the Q to pick an integer kernel);
``if_read``  quantized only when a quantized node reads it (MatMul/Gemm can write float: a
             classifier's logits stay exact);
``shared``   quantized with the input's parameters (max pooling and reshapes move values
             without changing them, so input and output share scale and zero point).

A Relu, or a Clip from 0, right after a quantized producer is *removable*: quantizing the
producer's output with the activation's range (zero point at the bottom of the integer range)
clamps exactly as the activation does, so the node goes and the pair runs as one integer kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from converter.quantize.config import QuantConfig
from converter.quantize.graph import GraphEditor, float_attribute, int_attribute
from lite.format import fused_activation
from lite.format import ir as lite_ir


@dataclass
class Request:
    activations: list[int] = field(default_factory=list)  # input slots to quantize
    weights: dict[int, int | None] = field(default_factory=dict)  # input slot -> channel axis (None: per tensor)
    bias: int | None = None  # input slot of a bias quantized to int32 (input slot 0 x weight slot 1)
    constants: list[int] = field(default_factory=list)  # constant input slots quantized like activations
    output: str = "always"  # always | if_read | shared
    removable: tuple[float, float] | None = None  # Relu/Clip: the clamp it applies


class Quantizer(Protocol):
    def check(self, node: lite_ir.Node, graph: GraphEditor, config: QuantConfig) -> Request | str: ...


def _input(node: lite_ir.Node, slot: int) -> int:
    return node.inputs[slot] if len(node.inputs) > slot else -1


def _fused_activation_reason(node: lite_ir.Node) -> str | None:
    attribute = node.attributes.get(fused_activation.ATTRIBUTE)
    if attribute is None:
        return None
    name = attribute.value.decode() if isinstance(attribute.value, bytes) else str(attribute.value)
    if name not in fused_activation.CLAMPING:  # an integer kernel reproduces those by clamping
        return f"fused activation {name} has no integer kernel in ONNX Runtime"
    return None


def _activation_reason(graph: GraphEditor, node: lite_ir.Node, slots: list[int]) -> str | None:
    for slot in slots:
        index = _input(node, slot)
        if not graph.is_activation(index):
            what = "missing" if index < 0 else f"{graph.tensor(index).name!r} ({graph.tensor(index).dtype.name}, "
            what += "" if index < 0 else ("constant)" if graph.tensor(index).data is not None else "not float32)")
            return f"input {slot} {what} is not a float32 activation"
    return None


class ConvQuantizer:
    """Conv: x uint8 per tensor, W int8 per output channel (axis 0), B int32 → QLinearConv."""

    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, [0]) or _fused_activation_reason(node)
        if reason:
            return reason
        weight = graph.constant(_input(node, 1))
        if weight is None or weight.ndim < 3:
            return "the weight is not a constant float32 tensor of rank >= 3"
        bias_index = _input(node, 2)
        if bias_index >= 0:
            bias = graph.constant(bias_index)
            if bias is None or bias.shape != (weight.shape[0],):
                return f"the bias is not a constant float32 vector of {weight.shape[0]} values"
        return Request(activations=[0], weights={1: 0 if config.per_channel else None},
                       bias=2 if bias_index >= 0 else None, output="always")


class GemmQuantizer:
    """Gemm (Y = A B + C): A uint8, B int8 per output column, C int32 → QGemm."""

    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, [0]) or _fused_activation_reason(node)
        if reason:
            return reason
        if int_attribute(node, "transA", 0) or float_attribute(node, "alpha", 1.0) != 1.0:
            return "transA or alpha != 1 is not quantized"
        weight = graph.constant(_input(node, 1))
        if weight is None or weight.ndim != 2:
            return "B is not a constant float32 matrix"
        trans_b = int_attribute(node, "transB", 0)
        columns = weight.shape[0] if trans_b else weight.shape[1]
        bias_index = _input(node, 2)
        if bias_index >= 0:
            bias = graph.constant(bias_index)
            if bias is None or bias.shape != (columns,) or float_attribute(node, "beta", 1.0) != 1.0:
                return f"C is not a constant float32 vector of {columns} values with beta 1"
        axis = (0 if trans_b else 1) if config.per_channel else None
        return Request(activations=[0], weights={1: axis}, bias=2 if bias_index >= 0 else None, output="if_read")


class MatMulQuantizer:
    """MatMul: A uint8; a constant B int8 per column (axis 1), else B uint8 per tensor."""

    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, [0]) or _fused_activation_reason(node)
        if reason:
            return reason
        weight = graph.constant(_input(node, 1))
        if weight is not None:
            if weight.ndim != 2:
                return "a constant B of rank other than 2 is not quantized"
            return Request(activations=[0], weights={1: 1 if config.per_channel else None}, output="if_read")
        reason = _activation_reason(graph, node, [1])
        if reason:
            return reason
        return Request(activations=[0, 1], output="if_read")


class BinaryQuantizer:
    """Add, Mul of two activations → QLinearAdd / QLinearMul; and Add of an activation and a
    constant vector (a per-channel shift: what is left of a BatchNormalization no layer absorbed,
    see ``fold_scale_through_relu``): the vector is quantized per tensor with the activations'
    type and its own range, as ONNX Runtime's QLinearAdd reads both inputs, and is stored as
    8-bit integers. A constant Mul stays float: on SwiftFormer's layer scales ONNX Runtime's
    QLinearMul lowered the logits' cosine from 0.99998 to 0.99987."""

    def check(self, node, graph, config):
        constants = [slot for slot in (0, 1) if node.op_type == "Add" and graph.constant(_input(node, slot)) is not None]
        if len(constants) != 1:
            reason = _activation_reason(graph, node, [0, 1])
            if reason:
                return reason
            return Request(activations=[0, 1], output="always")
        slot = constants[0]
        reason = _activation_reason(graph, node, [1 - slot]) or _vector_reason(graph.constant(_input(node, slot)))
        if reason:
            return reason
        if len(graph.readers(_input(node, slot))) != 1:
            return "the constant is read by other nodes too (one integer copy each would store it several times)"
        return Request(activations=[1 - slot], constants=[slot], output="always")


def _vector_reason(value: np.ndarray) -> str | None:
    """Why a constant operand of Add/Mul stays float (None: it is one vector along one axis)."""
    if value.dtype != np.float32:
        return f"the constant is {value.dtype}, not float32"
    real_axes = [d for d in value.shape if d != 1]
    if len(real_axes) != 1:
        return f"the constant of shape {value.shape} is not a vector along one axis"
    if not np.all(np.isfinite(value)):
        return "the constant has values that are not finite"
    return None


class PoolQuantizer:
    """AveragePool, GlobalAveragePool: the output has its own range → QLinear(Global)AveragePool."""

    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, [0])
        if reason:
            return reason
        return Request(activations=[0], output="always")


class PassThroughQuantizer:
    """MaxPool, Flatten, Reshape, Transpose, Squeeze, Unsqueeze: values move, the scale is shared."""

    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, [0])
        if reason:
            return reason
        if len([o for o in node.outputs if o >= 0]) != 1:
            return "a second output (MaxPool indices) is not quantized"
        return Request(activations=[0], output="shared")


class ConcatQuantizer:
    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, list(range(len(node.inputs))))
        if reason:
            return reason
        return Request(activations=list(range(len(node.inputs))), output="always")


class ActivationQuantizer:
    """Relu, and Clip with a lower bound of 0 (ReLU6): removable after a quantized producer."""

    def check(self, node, graph, config):
        reason = _activation_reason(graph, node, [0])
        if reason:
            return reason
        if node.op_type == "Relu":
            return Request(activations=[0], output="always", removable=(0.0, np.inf))
        low, high = _clip_bounds(node, graph)
        if low is None:
            return "Clip bounds are not constant"
        if low != 0.0:
            return f"Clip from {low} (not 0) is kept in float"
        return Request(activations=[0], output="always", removable=(0.0, high))


def _clip_bounds(node: lite_ir.Node, graph: GraphEditor) -> tuple[float | None, float]:
    if "min" in node.attributes or "max" in node.attributes:  # opset < 11
        return float_attribute(node, "min", -np.inf), float_attribute(node, "max", np.inf)
    bounds = []
    for slot, default in ((1, -np.inf), (2, np.inf)):
        index = _input(node, slot)
        if index < 0:
            bounds.append(default)
            continue
        value = graph.constant(index)
        if value is None or value.size != 1:
            return None, np.inf
        bounds.append(float(value.reshape(-1)[0]))
    return bounds[0], bounds[1]


QUANTIZERS: dict[str, Quantizer] = {
    "Conv": ConvQuantizer(),
    "Gemm": GemmQuantizer(),
    "MatMul": MatMulQuantizer(),
    "Add": BinaryQuantizer(),
    "Mul": BinaryQuantizer(),
    "AveragePool": PoolQuantizer(),
    "GlobalAveragePool": PoolQuantizer(),
    "MaxPool": PassThroughQuantizer(),
    "Flatten": PassThroughQuantizer(),
    "Reshape": PassThroughQuantizer(),
    "Transpose": PassThroughQuantizer(),
    "Squeeze": PassThroughQuantizer(),
    "Unsqueeze": PassThroughQuantizer(),
    "Concat": ConcatQuantizer(),
    "Relu": ActivationQuantizer(),
    "Clip": ActivationQuantizer(),
}

# The nodes whose error the per-layer sensitivity measures and the fallback may keep in float:
# the ones with weights or arithmetic (moving values around adds no error of its own).
LAYER_OPS = ("Conv", "Gemm", "MatMul", "Add", "Mul", "AveragePool", "GlobalAveragePool", "Concat")
