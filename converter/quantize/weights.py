"""int8 weights for the dynamic and weight-only modes.

``int8-weight``: every large float weight of Conv, ConvTranspose, Gemm and MatMul becomes int8
(symmetric, per output channel, TFLite's weight scheme) read through one DequantizeLinear, so the
file holds a quarter of the bytes and the computation stays float. Embedding tables and large
constants of Add/Mul are stored int8 as :mod:`converter.quantize.tables` says.

``int8-dynamic`` (ONNX Runtime's ``quantize_dynamic`` form): a MatMul/Gemm with a constant
weight becomes::

    x ─► DynamicQuantizeLinear ─► x_q, x_scale, x_zero ─┐
    W_q (int8, [K, N]) ─────────────────────────────────┼─► MatMulInteger ─► Cast ─► Mul ─► (+ bias) ─► y
                                     x_scale × W_scale ─┘                          ▲
                                                                                   └── Mul(x_scale, W_scale)

which ONNX Runtime fuses into DynamicQuantizeMatMul; activations are quantized per call from
their own min/max (https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html), so no
calibration data is needed. W's zero point is 0, MatMulInteger's default, so it is left out,
and W_q carries no QuantParams (its scales are the W_scale constant: the file holds them once).
Convolutions (patch embeddings, audio feature extractors) and recurrent layers keep float
arithmetic with int8 weights, one scale per output channel, scaled back by a Cast and a Mul that
both engines fold when they load the model (:func:`converter.quantize.tables.scaled_weight`);
embedding tables and large Add/Mul constants are stored int8 too (:mod:`converter.quantize.tables`,
which also stores a tied table and its LM head once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from converter.quantize.config import QuantConfig
from converter.quantize.graph import GraphEditor, default_opset, float_attribute, int_attribute
from converter.quantize.scheme import quantize_weight
from converter.quantize.static import QuantizedGraph
from converter.quantize.tables import RECURRENT, Int8Weights, dequantized_weight, quantize_tables
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType
from lite.ops import fused_activation

MIN_WEIGHT_ELEMENTS = 256  # smaller weights stay float: the DequantizeLinear would cost more than it saves
# op type -> (weight input slot, channel axis; None: decided by the node)
WEIGHT_SLOTS: dict[str, tuple[int, int | None]] = {
    "Conv": (1, 0),
    "ConvTranspose": (1, 1),
    "Gemm": (1, None),
    "MatMul": (1, 1),
    "Gather": (0, 0),  # a table that is also a layer's weight (tied): one DequantizeLinear for both
}
# the layers int8-dynamic runs in integer arithmetic (MatMulInteger), and those it keeps in float
# arithmetic with int8 weights (converter.quantize.tables)
DYNAMIC_LAYERS = ("MatMul", "Gemm")
FLOAT_LAYERS = ("Conv", "ConvTranspose", *RECURRENT)
_INT = lite_ir.AttributeType.INT


def quantize_weights_only(model: lite_ir.Model, config: QuantConfig) -> QuantizedGraph:
    graph = GraphEditor(model)
    result = QuantizedGraph(model)
    if config.per_channel and default_opset(model) < 13:
        result.warnings.append("opset < 13 has no per-axis DequantizeLinear: weights quantized per tensor")
    # Tables first: one that a layer also reads (tied) is left to its DequantizeLinear below.
    quantize_tables(graph, config, result.quantized, declined=[])
    _dequantize_weights(graph, config, result, WEIGHT_SLOTS)
    result.model = graph.finish()
    return result


def _dequantize_weights(graph: GraphEditor, config: QuantConfig, result: QuantizedGraph,
                        slots: dict[str, tuple[int, int | None]]) -> None:
    """Read the large float weights of the ``slots`` layers through one DequantizeLinear each."""
    per_axis_ok = default_opset(graph.source) >= 13
    done: dict[int, int] = {}
    for node in graph.nodes:
        entry = slots.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if entry is None or node.name in config.exclude or id(node) in graph.removed:
            continue
        slot, axis = entry
        index = node.inputs[slot] if len(node.inputs) > slot else -1
        weight = graph.constant(index)
        if weight is None or weight.size < MIN_WEIGHT_ELEMENTS:
            continue
        if axis is None:  # Gemm: the output channel is B's axis 0 with transB
            axis = 0 if int_attribute(node, "transB", 0) else 1
        if not config.per_channel or not per_axis_ok or weight.ndim < 2:
            axis = None
        if index not in done:
            done[index] = dequantized_weight(graph, index, weight, axis)
        node.inputs[slot] = done[index]
        result.quantized.append(node.name)


@dataclass
class _Activation:
    op_type: str
    params: tuple[float, ...] = field(default_factory=tuple)


def quantize_dynamic(model: lite_ir.Model, config: QuantConfig) -> QuantizedGraph:
    graph = GraphEditor(model)
    result = QuantizedGraph(model)
    quantized_inputs: dict[int, tuple[int, int, int]] = {}
    int8_weights = Int8Weights()
    for node in list(graph.nodes):
        if node.domain not in ("", "ai.onnx") or node.op_type not in DYNAMIC_LAYERS:
            continue
        if node.name in config.exclude:
            result.declined.append((node.name, node.op_type, "kept in float (excluded)"))
            continue
        reason = _dynamic_reason(graph, node)
        if reason:
            result.declined.append((node.name, node.op_type, reason))
            continue
        _rewrite_dynamic(graph, node, config, quantized_inputs, int8_weights)
        result.quantized.append(node.name)
    quantize_tables(graph, config, result.quantized, result.declined, layers=FLOAT_LAYERS,
                    int8_weights=int8_weights)
    result.model = graph.finish()
    return result


def _dynamic_reason(graph: GraphEditor, node: lite_ir.Node) -> str | None:
    if not graph.is_activation(node.inputs[0]):
        return "input A is not a float32 activation"
    weight = graph.constant(node.inputs[1])
    if weight is None or weight.ndim != 2:
        return "B is not a constant float32 matrix"
    if node.op_type == "Gemm":
        if int_attribute(node, "transA", 0) or float_attribute(node, "alpha", 1.0) != 1.0:
            return "transA or alpha != 1 is not quantized"
        if len(node.inputs) > 2 and node.inputs[2] >= 0:
            columns = weight.shape[0] if int_attribute(node, "transB", 0) else weight.shape[1]
            bias = graph.constant(node.inputs[2])
            if bias is None or bias.shape not in ((columns,), (1, columns)) or float_attribute(node, "beta", 1.0) != 1.0:
                return "C is not a constant bias vector with beta 1"
    activation = _activation(node)
    if activation is not None and activation.op_type not in ("Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu"):
        return f"fused activation {activation.op_type} is not rebuilt by the dynamic rewrite"
    return None


def _activation(node: lite_ir.Node) -> _Activation | None:
    attribute = node.attributes.get(fused_activation.ATTRIBUTE)
    if attribute is None:
        return None
    name = attribute.value.decode() if isinstance(attribute.value, bytes) else str(attribute.value)
    params = node.attributes.get(fused_activation.PARAMS_ATTRIBUTE)
    return _Activation(name, tuple(params.value) if params is not None else ())


def _rewrite_dynamic(graph: GraphEditor, node: lite_ir.Node, config: QuantConfig,
                     quantized_inputs: dict[int, tuple[int, int, int]], int8_weights: Int8Weights) -> None:
    name = node.name or node.op_type
    x, output = node.inputs[0], node.outputs[0]
    weight = graph.constant(node.inputs[1])
    if node.op_type == "Gemm" and int_attribute(node, "transB", 0):
        weight = weight.T
    values, params = quantize_weight(weight, 1 if config.per_channel else None)
    columns = weight.shape[1]
    weight_name = graph.tensor(node.inputs[1]).name
    # No QuantParams on W_q: its scales are W_scale, a constant of the graph, written once.
    w_q = graph.add_constant(f"{weight_name}_quantized", values, DataType.INT8)
    w_scale = graph.add_constant(f"{weight_name}_scale", params.scale if config.per_channel else np.float32(params.scale[0]), DataType.FLOAT)
    if config.per_channel:
        int8_weights.remember(weight, 1, w_q, w_scale)
    nodes = []
    if x not in quantized_inputs:
        x_name = graph.tensor(x).name
        x_q = graph.add_tensor(f"{x_name}_quantized", DataType.UINT8, graph.tensor(x).shape)
        x_scale = graph.add_tensor(f"{x_name}_scale", DataType.FLOAT, ())
        x_zero = graph.add_tensor(f"{x_name}_zero_point", DataType.UINT8, ())
        quantized_inputs[x] = (x_q, x_scale, x_zero)
        nodes.append(graph.new_node("DynamicQuantizeLinear", [x], [x_q, x_scale, x_zero], f"{x_name}_DynamicQuantizeLinear"))
    x_q, x_scale, x_zero = quantized_inputs[x]
    shape = graph.tensor(output).shape
    accumulator = graph.add_tensor(f"{name}_int32", DataType.INT32, shape)
    as_float = graph.add_tensor(f"{name}_float", DataType.FLOAT, shape)
    scale = graph.add_tensor(f"{name}_scale", DataType.FLOAT, (columns,) if config.per_channel else ())
    nodes += [
        graph.new_node("MatMulInteger", [x_q, w_q, x_zero], [accumulator], f"{name}_MatMulInteger"),
        graph.new_node("Cast", [accumulator], [as_float], f"{name}_Cast", {"to": lite_ir.Attribute(_INT, int(DataType.FLOAT))}),
        graph.new_node("Mul", [x_scale, w_scale], [scale], f"{name}_scales"),
    ]
    tail = [("Mul", [as_float, scale])]
    if len(node.inputs) > 2 and node.inputs[2] >= 0:
        tail.append(("Add", [None, node.inputs[2]]))
    activation = _activation(node)
    if activation is not None:
        tail.append(_activation_step(graph, activation, name))
    previous = None
    for position, (op_type, inputs) in enumerate(tail):
        inputs = [previous if i is None else i for i in inputs]
        last = position == len(tail) - 1
        target = output if last else graph.add_tensor(f"{name}_{op_type.lower()}", DataType.FLOAT, shape)
        attributes = {"alpha": lite_ir.Attribute(lite_ir.AttributeType.FLOAT, activation.params[0])} \
            if op_type == "LeakyRelu" and activation and activation.params else {}
        nodes.append(graph.new_node(op_type, inputs, [target], f"{name}_{op_type}", attributes))
        previous = target
    graph.place_before(node, nodes)
    graph.remove_node(node)


def _activation_step(graph: GraphEditor, activation: _Activation, name: str) -> tuple[str, list[int | None]]:
    if activation.op_type == "Clip":
        low = graph.add_constant(f"{name}_clip_min", np.float32(activation.params[0]), DataType.FLOAT)
        high = graph.add_constant(f"{name}_clip_max", np.float32(activation.params[1]), DataType.FLOAT)
        return ("Clip", [None, low, high])
    return (activation.op_type, [None])
