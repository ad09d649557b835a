"""Static int8 quantization: calibrated ranges → QuantizeLinear/DequantizeLinear (QDQ) pairs.

For a quantized Conv the rewrite produces (ONNX QDQ form, https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html)::

    x ─► Q ─► x_q ─► DQ ─┐
    W_q (int8) ─► DQ ────┼─► Conv ─► y ─► Q ─► y_q ─► DQ ─► readers of y
    B_q (int32) ─► DQ ───┘

Every quantized tensor is an integer tensor with explicit :class:`QuantParams` in the .lite file;
the graph stays float in between, so any engine runs it (lite's numpy engine computes it
exactly as written), and ONNX Runtime replaces each ``DQ → op → Q`` group by its integer kernel
(QLinearConv, QLinearAdd, QGemm, ...). A Q and its DQ read the same scale and zero point constants;
tensors that share parameters (max pooling, reshapes) share their values, not the constants. The
.lite writer stores each weight's DQ group and each activation's Q/DQ pair as one tensor with
implied nodes (``lite.format.qdq``), and the reader writes the nodes out again.

Steps: (1) ask each node's quantizer (:mod:`converter.quantize.quantizers`) what it needs;
(2) drop a Relu/Clip(0, ·) that follows a quantized producer, quantizing the producer's output
with the activation's range instead; (3) give every quantized activation its parameters from
the calibrated range; (4) quantize weights (int8, per channel) and biases (int32, input scale ×
weight scale); (5) insert the Q/DQ pairs; (6) store embedding tables and large Add/Mul
constants, which stay float arithmetic, as int8 (:mod:`converter.quantize.tables`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from converter.quantize.config import QuantConfig
from converter.quantize.errors import QuantizationError
from converter.quantize.graph import GraphEditor, default_opset, describe
from converter.quantize.kept_float import (
    keep_disparate_concats_float,
    keep_moves_of_float_tensors_float,
    keep_unobserved_tensors_float,
)
from converter.quantize.quantizers import QUANTIZERS, Request
from converter.quantize.scheme import (
    activation_bounds,
    activation_params,
    bias_fitting_scale,
    quantize_bias,
    quantize_weight,
    weight_scale,
)
from converter.quantize.tables import quantize_tables
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType
from lite.format.qdq import DEQUANTIZE_NODE, DEQUANTIZED, QUANTIZE_NODE, QUANTIZED, SCALE, ZERO_POINT

Range = tuple[float, float]


@dataclass
class QuantizedGraph:
    """A quantized model and what happened to each node."""

    model: lite_ir.Model
    quantized: list[str] = field(default_factory=list)  # node names quantized
    declined: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, reason) kept in float
    removed: list[str] = field(default_factory=list)  # activations absorbed into a quantized output
    warnings: list[str] = field(default_factory=list)


def quantize_static(model: lite_ir.Model, ranges: dict[str, Range], config: QuantConfig, *,
                    include: Collection[str] | None = None, exclude: Collection[str] = ()) -> QuantizedGraph:
    """Quantize ``model`` (not modified) with calibrated ``ranges`` (tensor name → [low, high]).

    ``include``: quantize only these nodes (per-layer sensitivity); ``exclude``: keep these in float.
    """
    opset = default_opset(model)
    if opset < 10:
        raise QuantizationError(f"the model uses opset {opset}; QuantizeLinear needs opset >= 10: re-export at opset >= 13")
    result = QuantizedGraph(model)
    if config.per_channel and opset < 13:
        config = _per_tensor(config)
        result.warnings.append(f"opset {opset} has no per-axis DequantizeLinear (opset 13): weights quantized per tensor")
    graph = GraphEditor(model)
    excluded = set(exclude) | set(config.exclude)
    requests = _requests(graph, config, include, excluded, result)
    keep_unobserved_tensors_float(graph, requests, ranges, result)
    keep_disparate_concats_float(graph, requests, ranges, result)
    _keep_magnified_tensors_float(graph, requests, result)
    _keep_constant_operands_cheap(graph, requests, result)
    keep_moves_of_float_tensors_float(graph, requests, result)
    forced = _remove_activations(graph, requests, ranges, result)
    shared, own = _mark_tensors(graph, requests, forced)
    params = _parameters(graph, own, shared, ranges, forced, config)
    for node, request in requests:
        _quantize_weights(graph, node, request, params, config.activation_type, result)
    _insert_pairs(graph, params, shared, config)
    result.quantized = [node.name for node, _ in requests]
    # Tables last, on the finished graph: a Gather's rows are rewritten after its output's Q/DQ pair.
    tables = GraphEditor(graph.finish())
    quantize_tables(tables, config, result.quantized, result.declined, include=include, exclude=excluded)
    result.model = tables.finish()
    return result


def _per_tensor(config: QuantConfig) -> QuantConfig:
    return dataclasses.replace(config, per_channel=False)


def _requests(graph: GraphEditor, config: QuantConfig, include, excluded, result: QuantizedGraph):
    requests: list[tuple[lite_ir.Node, Request]] = []
    for node in graph.nodes:
        quantizer = QUANTIZERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if quantizer is None or (include is not None and node.name not in include):
            continue
        if node.name in excluded:
            result.declined.append((node.name, node.op_type, "kept in float (excluded)"))
            continue
        outcome = quantizer.check(node, graph, config)
        if isinstance(outcome, str):
            result.declined.append((node.name, node.op_type, outcome))
        else:
            requests.append((node, outcome))
    return requests


# Ops whose error grows without bound as their input nears zero: a fixed int8 step there is
# an unbounded relative error. Slot: the input that matters (a Div's divisor).
_MAGNIFIERS = {"Log": 0, "Reciprocal": 0, "Div": 1}
# Ops that carry their inputs' small values, element by element, to their output (scaled,
# squared, moved). Not reductions: a sum or mean over many elements is not small where some are,
# so a LayerNormalization written out (x - mean) / sqrt(mean((x - mean)^2) + eps) stays int8.
_CARRIERS = frozenset({
    "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Concat", "Mul", "Add",
    "Sub", "Neg", "Abs", "Pow", "Sqrt", "Max", "Min", "Clip", "Relu",
})
_CARRIED_STEPS = 8


def _keep_magnified_tensors_float(graph: GraphEditor, requests, result: QuantizedGraph) -> None:
    """Decline every node that would quantize a tensor whose small values a Log, Reciprocal or
    divisor magnifies, through at most a few carrying ops (the log-power spectrum of a speech
    model: Conv (STFT) -> Mul(x, x) -> Add -> Sqrt -> Max(eps, .) -> Log).

    int8 spends its 256 steps evenly over the calibrated range; values below one step become 0
    and the logarithm turns them into its floor. On the DNSMOS speech-quality model quantizing its
    STFT convolutions' outputs moved the score by 2.3 on a 1-5 scale (0.04 with them in float).
    """
    magnified = _magnified_tensors(graph)
    if not magnified:
        return
    kept = []
    for node, request in requests:
        touched = [node.inputs[slot] for slot in request.activations]
        if request.output in ("always", "shared"):  # "if_read": its reader decides, and is checked here
            touched.append(node.outputs[0])
        hit = next((index for index in touched if index in magnified), None)
        if hit is None:
            kept.append((node, request))
            continue
        reader = magnified[hit]
        result.declined.append((node.name, node.op_type, f"{graph.tensor(hit).name!r} reaches {reader.op_type} "
                                f"node {reader.name!r}, which magnifies its small values; int8 would round them to 0"))
    requests[:] = kept


def _magnified_tensors(graph: GraphEditor) -> dict[int, lite_ir.Node]:
    """Tensor index -> the magnifying node its values reach through carrying ops."""
    magnified: dict[int, lite_ir.Node] = {}
    for node in graph.nodes:
        slot = _MAGNIFIERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if slot is None or len(node.inputs) <= slot or graph.constant(node.inputs[slot]) is not None:
            continue
        frontier = [node.inputs[slot]]
        for _ in range(_CARRIED_STEPS):
            reached = []
            for index in frontier:
                if index < 0 or index in magnified or not graph.is_activation(index):
                    continue
                magnified[index] = node
                producer = graph.producer.get(index)
                if producer is not None and producer.op_type in _CARRIERS:
                    reached.extend(producer.inputs)
            frontier = reached
    return magnified


def _keep_constant_operands_cheap(graph: GraphEditor, requests, result: QuantizedGraph) -> None:
    """Decline Add/Mul with a constant operand unless other nodes quantize its input and output.

    Where both already pass through Q/DQ pairs (DenseNet: Concat → Add(shift) → Relu → Conv),
    quantizing the node only changes how its constant is stored. Elsewhere it would add pairs,
    and error, where there were none (a BatchNormalization on a residual branch, a float
    MatMul output before its bias Add).
    """
    inputs: set[int] = set()
    outputs: set[int] = set()
    for node, request in requests:
        if request.constants:
            continue
        inputs.update(node.inputs[slot] for slot in request.activations)
        if request.output in ("always", "shared"):
            outputs.add(node.outputs[0])
    kept = []
    for node, request in requests:
        sources = [node.inputs[slot] for slot in request.activations]
        if request.constants and (node.outputs[0] not in inputs or not set(sources) <= inputs | outputs):
            result.declined.append((node.name, node.op_type, "its input or output is not quantized otherwise "
                                    "(quantizing it would add Q/DQ pairs; the constant stays float)"))
            continue
        kept.append((node, request))
    requests[:] = kept


def _remove_activations(graph: GraphEditor, requests, ranges: dict[str, Range], result: QuantizedGraph) -> dict[int, Range]:
    """Absorb removable Relu/Clip nodes; return tensor index → forced range for their inputs."""
    by_node = {id(node): request for node, request in requests}
    forced: dict[int, Range] = {}
    kept = []
    for node, request in requests:
        if request.removable is None:
            kept.append((node, request))
            continue
        source, target = node.inputs[0], node.outputs[0]
        producer = graph.producer.get(source)
        producer_request = by_node.get(id(producer)) if producer is not None else None
        absorbable = (
            producer_request is not None
            and producer_request.output in ("always", "if_read")
            and graph.readers(source) == [node]
            and not graph.is_output(source)
            and graph.tensor(target).name in ranges
        )
        if not absorbable:
            kept.append((node, request))
            continue
        low, high = ranges[graph.tensor(target).name]
        clamp_low, clamp_high = request.removable
        forced[source] = (max(low, clamp_low), min(high, clamp_high))
        graph.redirect(target, source)
        graph.remove_node(node)
        result.removed.append(node.name)
    requests[:] = kept
    return forced


def _mark_tensors(graph: GraphEditor, requests, forced: dict[int, Range]) -> tuple[dict[int, int], set[int]]:
    """Which activation tensors get a Q/DQ pair: ``own`` parameters, or ``shared`` with another."""
    own: set[int] = set(forced)
    shared: dict[int, int] = {}
    for node, request in requests:
        for slot in request.activations:
            own.add(node.inputs[slot])
        output = node.outputs[0]
        if request.output == "always":
            own.add(output)
        elif request.output == "shared":
            shared[output] = node.inputs[0]
    own -= set(shared)
    return shared, own


def _parameters(graph: GraphEditor, own: set[int], shared: dict[int, int], ranges: dict[str, Range],
                forced: dict[int, Range], config: QuantConfig) -> dict[int, lite_ir.QuantParams]:
    params: dict[int, lite_ir.QuantParams] = {}
    for index in sorted(own):
        name = graph.tensor(index).name
        value_range = forced.get(index, ranges.get(name))
        if value_range is None:
            raise QuantizationError(
                f"tensor {name!r} has no calibrated range (no calibration sample reached it); "
                "check that the calibration data exercises the whole graph"
            )
        params[index] = activation_params(*value_range, config.activation_type)
    for index in sorted(shared):
        root, seen = index, set()
        while root in shared and root not in seen:
            seen.add(root)
            root = shared[root]
        if root not in params:
            raise QuantizationError(f"tensor {graph.tensor(index).name!r} shares parameters with an unquantized tensor")
        params[index] = params[root]
    return params


def _quantize_weights(graph: GraphEditor, node: lite_ir.Node, request: Request, params, activation_type: str,
                      result: QuantizedGraph) -> None:
    weight_scales = None
    for slot, axis in request.weights.items():
        index = node.inputs[slot]
        tensor = graph.tensor(index)
        scale = _bias_fitting_scale(graph, node, request, params, axis, result) if slot == 1 else None
        values, weight_params = quantize_weight(graph.constant(index), axis, scale)
        weight_scales = weight_params.scale
        quantized = graph.add_constant(tensor.name + QUANTIZED, values, DataType.INT8, weight_params)
        node.inputs[slot] = _dequantize_constant(graph, node, quantized, weight_params, tensor)
    for slot in request.constants:
        index = node.inputs[slot]
        node.inputs[slot] = _quantize_constant(graph, node, index, activation_type)
    if request.bias is None:
        return
    index = node.inputs[request.bias]
    tensor = graph.tensor(index)
    input_params = params[node.inputs[0]]
    values, bias_params = quantize_bias(graph.constant(index), float(input_params.scale[0]), weight_scales)
    quantized = graph.add_constant(tensor.name + QUANTIZED, values, DataType.INT32, bias_params)
    node.inputs[request.bias] = _dequantize_constant(graph, node, quantized, bias_params, tensor)


def _bias_fitting_scale(graph: GraphEditor, node: lite_ir.Node, request: Request, params, axis: int | None,
                        result: QuantizedGraph) -> np.ndarray | None:
    """The weight scales of ``node``, raised where its int32 bias would overflow (None: none
    raised); each raise is a warning naming the node, since it changes the weights' precision."""
    if request.bias is None:
        return None
    weight = graph.constant(node.inputs[1])
    peaks = weight_scale(weight, None if axis is None else axis % weight.ndim)
    input_scale = float(params[node.inputs[0]].scale[0])
    bias = graph.constant(node.inputs[request.bias])
    scale = bias_fitting_scale(bias, input_scale, peaks)
    raised = np.flatnonzero(scale > peaks)
    if raised.size == 0:
        return None
    result.warnings.append(
        f"{describe(node)}: its bias (up to {float(np.max(np.abs(bias))):.3g}) would overflow int32 at "
        f"its input's scale ({input_scale:.3g}) × its weights' scale; the weight scale of {raised.size} of "
        f"{peaks.size} channel(s) was raised (up to {float(np.max(scale[raised] / peaks[raised])):.3g}×) so the "
        "bias stays exact, at the cost of its weights' precision (its input's range is tiny next to the bias)")
    return scale


def _quantize_constant(graph: GraphEditor, reader: lite_ir.Node, index: int, activation_type: str) -> int:
    """A constant operand of Add/Mul as DQ(integers of the activation type, per tensor, its own range)."""
    tensor = graph.tensor(index)
    value = graph.constant(index)
    params = activation_params(float(value.min()), float(value.max()), activation_type)
    qmin, qmax = activation_bounds(activation_type)
    integer, storage = (DataType.UINT8, np.uint8) if activation_type == "uint8" else (DataType.INT8, np.int8)
    scale, zero_point = params.scale[0], int(params.zero_point[0])
    values = np.clip(np.rint(value / scale) + zero_point, qmin, qmax).astype(storage)
    quantized = graph.add_constant(tensor.name + QUANTIZED, values, integer, params)
    scale_index = graph.add_constant(tensor.name + SCALE, np.float32(scale), DataType.FLOAT)
    zero_index = graph.add_constant(tensor.name + ZERO_POINT, np.array(zero_point, storage), integer)
    output = graph.add_tensor(tensor.name + DEQUANTIZED, DataType.FLOAT, tensor.shape)
    node = graph.new_node("DequantizeLinear", [quantized, scale_index, zero_index], [output],
                          tensor.name + DEQUANTIZE_NODE)
    graph.place_before(reader, [node])
    return output


def _dequantize_constant(graph: GraphEditor, reader: lite_ir.Node, quantized: int,
                         params: lite_ir.QuantParams, original: lite_ir.Tensor) -> int:
    """DQ(quantized) → a float tensor in place of ``original`` for ``reader`` (zero point 0: omitted)."""
    per_axis = params.axis is not None
    scale_array = params.scale if per_axis else np.float32(params.scale[0])
    scale = graph.add_constant(original.name + SCALE, np.asarray(scale_array, np.float32), DataType.FLOAT)
    zero_dtype = np.int8 if params.bits == 8 else np.int32
    zero_array = np.zeros(params.scale.size, zero_dtype) if per_axis else zero_dtype(0)
    zero = graph.add_constant(original.name + ZERO_POINT, np.asarray(zero_array),
                              DataType.INT8 if params.bits == 8 else DataType.INT32)
    output = graph.add_tensor(original.name + DEQUANTIZED, DataType.FLOAT, original.shape)
    attributes = {"axis": lite_ir.Attribute(lite_ir.AttributeType.INT, int(params.axis))} if per_axis else {}
    node = graph.new_node("DequantizeLinear", [quantized, scale, zero], [output], original.name + DEQUANTIZE_NODE, attributes)
    graph.place_before(reader, [node])
    return output


def _insert_pairs(graph: GraphEditor, params: dict[int, lite_ir.QuantParams], shared: dict[int, int],
                  config: QuantConfig) -> None:
    integer = DataType.UINT8 if config.activation_type == "uint8" else DataType.INT8
    storage = np.uint8 if config.activation_type == "uint8" else np.int8
    for index in sorted(params):
        tensor = graph.tensor(index)
        quant = params[index]
        # Each pair has its own scale and zero point, even where the values are shared (max
        # pooling): then the .lite writer stores the pair as one annotated tensor (lite.format.qdq).
        scale = graph.add_constant(tensor.name + SCALE, np.float32(quant.scale[0]), DataType.FLOAT)
        zero = graph.add_constant(tensor.name + ZERO_POINT, np.array(quant.zero_point[0], storage), integer)
        readers = graph.readers(index)
        quantized = graph.add_tensor(tensor.name + QUANTIZED, integer, tensor.shape, quant=quant)
        dequantized = graph.add_tensor(tensor.name + DEQUANTIZED, DataType.FLOAT, tensor.shape)
        q = graph.new_node("QuantizeLinear", [index, scale, zero], [quantized], tensor.name + QUANTIZE_NODE)
        dq = graph.new_node("DequantizeLinear", [quantized, scale, zero], [dequantized], tensor.name + DEQUANTIZE_NODE)
        graph.place_after_producer(index, [q, dq])
        graph.redirect(index, dequantized, readers)
        if graph.is_output(index):
            graph.outputs = [dequantized if i == index else i for i in graph.outputs]
            graph.swap_names(index, dequantized)


__all__ = ["QuantizedGraph", "describe", "quantize_static"]
