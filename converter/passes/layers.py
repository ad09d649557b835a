"""Per-output-channel arithmetic on the weights of Conv, ConvTranspose, Gemm and MatMul(+Add).

The folding passes all reduce to two operations on a *layer* (a node with a constant weight and,
possibly, a bias) whose output is ``y[..., o, ...]`` with one output channel ``o`` per index of
the channel axis:

- ``scale(layer, s)``: afterwards the layer computes ``s[o] · y`` (weights and bias scaled);
- ``shift(layer, t)``: afterwards it computes ``y + t[o]`` (bias added; created when missing).

Where each layer keeps its output channels (https://onnx.ai/onnx/operators/):

==============  =============================  =========================================
layer           weight                         output channel ``o`` of the weight
==============  =============================  =========================================
Conv            W (M, C/group, k...)           ``W[o]``; bias input 2, shape (M,)
ConvTranspose   W (C, M/group, k...)           ``W[g·C/group + c, j]`` with o = g·M/group + j
Gemm            B (K, M), or (M, K) if transB   column / row ``o``; bias ``beta·C``
MatMul(+Add)    B (K, M), 2-D                  column ``o``; bias is the Add's constant
==============  =============================  =========================================

Weights are rewritten in float64 and stored back in their own dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from converter.passes.base import (
    PassContext,
    add_initializer,
    attribute,
    constant,
    describe,
    foldable_weight,
    set_constant,
    sole_consumer,
)

LAYER_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE)


@dataclass
class Layer:
    node: ir.Node  # Conv / ConvTranspose / Gemm / MatMul
    weight: ir.Value
    bias: ir.Value | None  # Conv/ConvTranspose input 2, Gemm C, or the constant of the Add
    add: ir.Node | None  # MatMul+Add: the Add
    channels: int
    output: ir.Value  # the value carrying the layer's result (the Add's output for MatMul+Add)

    @property
    def rank(self) -> int | None:
        """Rank of the output when known (Conv: the weight's rank; Gemm: 2)."""
        if self.node.op_type in ("Conv", "ConvTranspose"):
            return len(self.weight.shape)
        if self.node.op_type == "Gemm":
            return 2
        shape = self.output.shape
        return None if shape is None else len(shape)

    @property
    def channel_axis(self) -> int:
        return 1 if self.node.op_type in ("Conv", "ConvTranspose", "Gemm") else -1


def find_layer(value: ir.Value | None, *, with_matmul: bool = True) -> Layer | None:
    """The layer producing ``value``, when its weight is a constant (no safety checks here)."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.domain != "":
        return None
    if node.op_type == "Add" and with_matmul:
        return _matmul_add(node, value)
    if node.op_type not in LAYER_OPS or (node.op_type == "MatMul" and not with_matmul):
        return None
    if len(node.inputs) < 2 or node.outputs[0] is not value:
        return None
    weight = node.inputs[1]
    array = constant(weight)
    if array is None or array.dtype.kind != "f":
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if node.op_type == "Conv":
        channels = array.shape[0]
    elif node.op_type == "ConvTranspose":
        channels = array.shape[1] * int(attribute(node, "group", 1))
    elif node.op_type == "Gemm":
        if array.ndim != 2:
            return None
        channels = array.shape[0] if attribute(node, "transB", 0) else array.shape[1]
    else:
        if array.ndim != 2:
            return None
        channels = array.shape[1]
    return Layer(node, weight, bias, None, channels, value)


def _matmul_add(add: ir.Node, value: ir.Value) -> Layer | None:
    for position in (0, 1):
        inner = add.inputs[position]
        bias = add.inputs[1 - position]
        if inner is None or bias is None or constant(bias) is None:
            continue
        layer = find_layer(inner, with_matmul=True)
        if layer is None or layer.node.op_type != "MatMul":
            continue
        return Layer(layer.node, layer.weight, bias, add, layer.channels, value)
    return None


def check_layer(layer: Layer) -> str | None:
    """Why the layer's weights must not be rewritten, or None."""
    node = layer.node
    if node.attributes.get("fused_activation") is not None:
        return f"{describe(node)} already has a fused activation"
    if layer.weight.dtype not in FLOAT_TYPES:
        return f"weight {layer.weight.name!r} is not floating point"
    reason = foldable_weight(layer.weight, node)
    if reason:
        return reason
    if layer.bias is not None:
        reason = foldable_weight(layer.bias, layer.add or node)
        if reason:
            return reason.replace("weight", "bias", 1)
    if layer.add is not None:
        inner = layer.node.outputs[0]
        if sole_consumer(inner) is not layer.add:
            return f"the output of {describe(node)} is also read elsewhere"
        if len(layer.bias.shape) > 1 and any(d != 1 for d in list(layer.bias.shape)[:-1]):
            return f"bias {layer.bias.name!r} {tuple(layer.bias.shape)} is not per output channel"
    return None


def per_channel(array: np.ndarray, layer: Layer) -> np.ndarray | None:
    """``array`` as one value per output channel (M,), if it broadcasts that way onto the output."""
    rank = layer.rank
    if array.size == 1 and (array.ndim <= 1 or (rank is not None and array.ndim <= rank)):
        return np.full(layer.channels, array.reshape(-1)[0])
    if rank is None:
        if array.ndim == 1 and layer.channel_axis == -1 and array.shape[0] == layer.channels:
            return array
        return None
    return along_axis(array, rank, layer.channel_axis % rank, layer.channels)


def along_axis(array: np.ndarray, rank: int, axis: int, channels: int) -> np.ndarray | None:
    """``array`` as (channels,), if it broadcasts onto a rank-``rank`` value along ``axis`` alone
    (one value, or one per index of ``axis``): a per-channel constant of any layout."""
    if array.ndim > rank:
        return None
    padded = (1,) * (rank - array.ndim) + tuple(array.shape)
    if padded[axis] not in (1, channels) or any(d != 1 for k, d in enumerate(padded) if k != axis):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,))


def scale(layer: Layer, s: np.ndarray) -> None:
    """Multiply output channel ``o`` of the layer by ``s[o]``."""
    node = layer.node
    weight = constant(layer.weight)
    w = weight.astype(np.float64)
    s = np.asarray(s, dtype=np.float64)
    if node.op_type == "Conv":
        w = w * s.reshape((-1,) + (1,) * (w.ndim - 1))
    elif node.op_type == "ConvTranspose":
        group = int(attribute(node, "group", 1))
        c_in, per_group = w.shape[0], w.shape[1]
        grouped = w.reshape((group, c_in // group, per_group) + w.shape[2:])
        grouped = grouped * s.reshape((group, 1, per_group) + (1,) * (w.ndim - 2))
        w = grouped.reshape(w.shape)
    elif node.op_type == "Gemm" and attribute(node, "transB", 0):
        w = w * s[:, None]
    else:  # Gemm (K, M) or MatMul (K, M)
        w = w * s[None, :]
    set_constant(layer.weight, w.astype(weight.dtype))
    if layer.bias is not None:
        bias = constant(layer.bias)
        if node.op_type == "Gemm":
            effective = bias.astype(np.float64) * float(attribute(node, "beta", 1.0))
            set_constant(layer.bias, (effective * s).astype(bias.dtype))
            node.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
        else:
            set_constant(layer.bias, (bias.astype(np.float64) * s).astype(bias.dtype))


def shift(layer: Layer, t: np.ndarray, context: PassContext) -> ir.Value:
    """Add ``t[o]`` to output channel ``o``; return the value now carrying the layer's result."""
    node = layer.node
    graph = node.graph
    dtype = constant(layer.weight).dtype
    t = np.asarray(t, dtype=np.float64)
    if layer.bias is not None:
        bias = constant(layer.bias).astype(np.float64)
        if node.op_type == "Gemm" and float(attribute(node, "beta", 1.0)) != 1.0:
            bias = bias * float(attribute(node, "beta", 1.0))
            node.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
        set_constant(layer.bias, (bias + t).astype(dtype))
        return layer.output
    name = context.unique_name(f"{node.name or node.op_type}_bias")
    bias_value = add_initializer(graph, t.astype(dtype), name)
    if node.op_type == "MatMul":
        add = ir.node("Add", [layer.output, bias_value], name=context.unique_name(f"{node.name or 'MatMul'}_add"))
        graph.insert_after(node, add)
        add.outputs[0].dtype = layer.output.dtype
        add.outputs[0].shape = None if layer.output.shape is None else ir.Shape(list(layer.output.shape))
        return add.outputs[0]
    if node.op_type == "Gemm":
        node.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
    if len(node.inputs) < 3:
        node.resize_inputs(3)
    node.replace_input_with(2, bias_value)
    return layer.output
