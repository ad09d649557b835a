"""Embedding tables and other large constants that no integer kernel reads, stored as int8.

A Gather from a constant float table (word, position and token-type embeddings) reads a few rows
per call, so the table is stored as int8 with one scale per row (symmetric, narrow range: the
weight scheme of :mod:`converter.quantize.scheme` along axis 0) and only the gathered rows are
dequantized::

    ids ─► Gather(table_q: int8 [V, D]) ───► Cast(float) ─► Mul ─► rows [..., D]
    ids ─► Gather(row_scale: float [V, 1]) ───────────────────┘

``rows = table_q[ids] · row_scale[ids]``: the values ``DequantizeLinear(table_q)[ids]`` would
give, but neither engine dequantizes the whole table on each call (ONNX Runtime does not fold a
DequantizeLinear of a constant: it would run it, over the whole table, on every call).

Tied embeddings (GPT-2's LM head multiplies by the table transposed): ``int8-dynamic`` first
stores the MatMul/Gemm weight ``W = tableᵀ`` as int8 with one scale per column, which are the
table's per-row values and scales. :class:`Int8Weights` remembers them, and the Gather then reads
``Transpose(W_q)`` and ``Reshape(W_scale, [-1, 1])``, constants that both engines compute once
when they load the model, so the file holds the table once.

Other large constants read only by float Add/Mul/Sub nodes (position embeddings added to patch
embeddings, attention biases) are stored as int8 with one scale per index of their last axis and
scaled back by ``Mul(Cast(C_q), scale)`` (:func:`scaled_weight`), which both engines compute
once at load; so are, in ``int8-dynamic``, the weights of the layers it runs in float arithmetic
(:data:`FLOAT_LAYER_WEIGHTS`: convolutions, LSTM, GRU, RNN), one scale per output channel.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from converter.quantize.config import QuantConfig
from converter.quantize.graph import GraphEditor, int_attribute
from converter.quantize.scheme import quantize_weight
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType

MIN_TABLE_ELEMENTS = 256  # smaller tables stay float: the three nodes cost more than they save
MIN_ADDEND_ELEMENTS = 256  # an Add/Mul constant this large and of 2 or more real axes is a table too
ELEMENTWISE = ("Add", "Mul", "Sub")
# The weights of layers that run in float arithmetic: op type -> (input slot, channel axis) pairs.
# int8-dynamic stores them int8 (its layers compute in float but for MatMul/Gemm). Static int8 keeps
# recurrent weights float: on ddddocr's CNN + LSTM recognizer, int8 LSTM weights on top of the
# static convolutions moved its per-step agreement from 96.4 % to 94.8 % (int8-dynamic: 98.8 %
# either way).
FLOAT_LAYER_WEIGHTS: dict[str, tuple[tuple[int, int], ...]] = {
    "Conv": ((1, 0),),
    "ConvTranspose": ((1, 1),),
    "LSTM": ((1, 1), (2, 1)),  # W and R: [directions, gates x hidden, ...], one scale per gate row
    "GRU": ((1, 1), (2, 1)),
    "RNN": ((1, 1), (2, 1)),
}
RECURRENT = ("LSTM", "GRU", "RNN")
_INT = lite_ir.AttributeType.INT


@dataclass
class Int8Weights:
    """The int8 copies already in a graph, by content: a weight quantized along one axis is the
    same int8 data as its transpose quantized along the other, so a tied table is stored once."""

    copies: dict[tuple, tuple[int, int, int]] = field(default_factory=dict)  # key -> (values, scale, axis)

    @staticmethod
    def _key(weight: np.ndarray, axis: int) -> tuple:
        channels_first = np.ascontiguousarray(np.moveaxis(weight, axis, 0))
        digest = hashlib.sha256(channels_first.tobytes()).digest()
        return channels_first.shape, channels_first.dtype.str, digest

    def remember(self, weight: np.ndarray, axis: int, values: int, scale: int) -> None:
        """``values`` (int8) and ``scale`` (one per index of ``axis``) quantize the 2-D ``weight``."""
        if weight.ndim == 2:
            self.copies.setdefault(self._key(weight, axis), (values, scale, axis))

    def find(self, weight: np.ndarray, axis: int) -> tuple[int, int, int] | None:
        return self.copies.get(self._key(weight, axis)) if weight.ndim == 2 else None


def quantize_tables(graph: GraphEditor, config: QuantConfig, quantized: list[str],
                    declined: list[tuple[str, str, str]], *, layers: Collection[str] = (),
                    include: Collection[str] | None = None, exclude: Collection[str] = (),
                    int8_weights: Int8Weights | None = None) -> None:
    """Rewrite, in ``graph``, the Gathers of large constant tables, the large constants of float
    Add/Mul/Sub nodes and the weights of the float ``layers`` (:data:`FLOAT_LAYER_WEIGHTS`);
    append the nodes rewritten to ``quantized`` and those left in float, with the reason, to
    ``declined``. ``include``: only these nodes (None: all); ``exclude`` and ``config.exclude``:
    never these."""
    skipped = set(exclude) | set(config.exclude)
    tables: dict[int, list[lite_ir.Node]] = {}
    constants: dict[int, int | None] = {}  # constant index -> channel axis (weights and addends)

    def wanted(node: lite_ir.Node) -> bool:
        if node.domain not in ("", "ai.onnx") or node.name in skipped:
            return False
        return include is None or node.name in include

    for node in list(graph.nodes):
        if id(node) in graph.removed or not wanted(node):
            continue
        if node.op_type == "Gather":
            table = graph.constant(node.inputs[0])
            if table is None or table.size < MIN_TABLE_ELEMENTS or not np.all(np.isfinite(table)):
                continue
            reason = _table_reason(graph, node, table, wanted)
            if reason:
                declined.append((node.name, node.op_type, reason))
                continue
            tables.setdefault(node.inputs[0], []).append(node)
        elif node.op_type in ELEMENTWISE:
            constants.update((index, graph.constant(index).ndim - 1) for index in node.inputs
                             if _is_addend(graph, index, wanted))
        elif node.op_type in layers:
            constants.update((node.inputs[slot], axis) for slot, axis in FLOAT_LAYER_WEIGHTS[node.op_type]
                             if _is_layer_weight(graph, node, slot, wanted))
    for index, gathers in tables.items():
        _rewrite_table(graph, index, gathers, config.per_channel, int8_weights)
        quantized.extend(node.name for node in gathers)
    for index, axis in sorted(constants.items()):
        weight = graph.constant(index)
        output = scaled_weight(graph, index, weight, axis if config.per_channel else None)
        for reader in _readers(graph, index):
            reader.inputs = [output if i == index else i for i in reader.inputs]
            if reader.name not in quantized:
                quantized.append(reader.name)


def _is_layer_weight(graph: GraphEditor, node: lite_ir.Node, slot: int,
                     wanted: Callable[[lite_ir.Node], bool]) -> bool:
    """Input ``slot`` of ``node`` is a large finite float constant that only float layers read as a weight."""
    index = node.inputs[slot] if len(node.inputs) > slot else -1
    weight = graph.constant(index)
    if weight is None or weight.size < MIN_TABLE_ELEMENTS or not np.all(np.isfinite(weight)):
        return False
    for reader in _readers(graph, index):
        slots = {slot for slot, _ in FLOAT_LAYER_WEIGHTS.get(reader.op_type, ())}
        if not wanted(reader) or any(i == index and position not in slots for position, i in enumerate(reader.inputs)):
            return False
    return True


def _table_reason(graph: GraphEditor, node: lite_ir.Node, table: np.ndarray,
                  wanted: Callable[[lite_ir.Node], bool]) -> str | None:
    if int_attribute(node, "axis", 0) % table.ndim != 0:
        return "a constant table gathered along an axis other than 0 stays float"
    for reader in _readers(graph, node.inputs[0]):
        gathers_rows = reader.op_type == "Gather" and reader.inputs[0] == node.inputs[0] \
            and int_attribute(reader, "axis", 0) % table.ndim == 0
        if not gathers_rows or not wanted(reader):
            return f"the table is also read by {reader.op_type} {reader.name!r}, which keeps it in float"
    return None


def _is_addend(graph: GraphEditor, index: int, wanted: Callable[[lite_ir.Node], bool]) -> bool:
    weight = graph.constant(index)
    if weight is None or weight.size < MIN_ADDEND_ELEMENTS or sum(size > 1 for size in weight.shape) < 2:
        return False
    if not np.all(np.isfinite(weight)):  # an attention mask of -inf has no int8 scale
        return False
    if _is_grid(weight):
        return False
    return all(reader.op_type in ELEMENTWISE and wanted(reader) for reader in _readers(graph, index))


def _is_grid(weight: np.ndarray) -> bool:
    """Every value a multiple of 1/16: coordinates (a detector's anchor points, pixel centres), not
    learned weights. Stored int8 with one scale per column, YOLOv8's (1, 2, 8400) anchor points
    (0.5 to 79.5) moved by up to 0.31 of a grid cell, which its strides made up to 10 pixels of
    box; learned weights are never all on such a grid."""
    scaled = weight.astype(np.float64) * 16
    return bool(np.all(scaled == np.round(scaled)))


def _readers(graph: GraphEditor, index: int) -> list[lite_ir.Node]:
    """The nodes reading ``index`` now (an earlier rewrite may have re-pointed a reader's input)."""
    return [reader for reader in graph.readers(index) if index in reader.inputs]


def _rewrite_table(graph: GraphEditor, index: int, gathers: list[lite_ir.Node], per_row: bool,
                   int8_weights: Int8Weights | None) -> None:
    table = graph.constant(index)
    values, scale = _int8_table(graph, index, table, per_row, int8_weights)
    for node in gathers:
        output = node.outputs[0]
        shape = graph.tensor(output).shape
        gathered = graph.add_tensor(f"{graph.tensor(output).name}_quantized", DataType.INT8, shape)
        node.inputs[0] = values
        node.outputs[0] = gathered
        graph.producer[gathered] = node
        rows = graph.add_tensor(f"{graph.tensor(output).name}_float", DataType.FLOAT, shape)
        nodes = [graph.new_node("Cast", [gathered], [rows], f"{node.name}_Cast",
                                {"to": lite_ir.Attribute(_INT, int(DataType.FLOAT))})]
        factor = scale
        if per_row:
            kept = None if shape is None else len(shape) - table.ndim + 1  # the ids' axes
            row_shape = None if shape is None else (*shape[:kept], *(1,) * (table.ndim - 1))
            factor = graph.add_tensor(f"{graph.tensor(output).name}_scale", DataType.FLOAT, row_shape)
            nodes.insert(0, graph.new_node("Gather", [scale, node.inputs[1]], [factor], f"{node.name}_scale"))
        nodes.append(graph.new_node("Mul", [rows, factor], [output], f"{node.name}_Mul"))
        graph.place_after_producer(gathered, nodes)


def _int8_table(graph: GraphEditor, index: int, table: np.ndarray, per_row: bool,
                int8_weights: Int8Weights | None) -> tuple[int, int]:
    """The int8 table and its scales: (V, 1, ...) per row, or a scalar."""
    name = graph.tensor(index).name
    stored = int8_weights.find(table, 0) if int8_weights is not None and per_row else None
    if stored is not None and stored[2] == 1:  # tied: the int8 weight of a MatMul by tableᵀ
        return _transposed_copy(graph, name, table, *stored[:2])
    values, params = quantize_weight(table, 0 if per_row else None)
    quantized = graph.add_constant(f"{name}_quantized", values, DataType.INT8)
    scale = params.scale.reshape((-1, *(1,) * (table.ndim - 1))) if per_row else np.float32(params.scale[0])
    return quantized, graph.add_constant(f"{name}_scale", scale, DataType.FLOAT)


def _transposed_copy(graph: GraphEditor, name: str, table: np.ndarray, values: int,
                     scale: int) -> tuple[int, int]:
    """``Transpose(values)`` and ``Reshape(scale, [-1, 1])``: constants both engines fold at load."""
    table_values = graph.add_tensor(f"{name}_quantized", DataType.INT8, table.shape)
    row_scale = graph.add_tensor(f"{name}_scale", DataType.FLOAT, (table.shape[0], 1))
    shape = graph.add_constant(f"{name}_scale_shape", np.array([-1, 1], np.int64), DataType.INT64)
    nodes = [
        graph.new_node("Transpose", [values], [table_values], f"{name}_Transpose",
                       {"perm": lite_ir.Attribute(lite_ir.AttributeType.INTS, [1, 0])}),
        graph.new_node("Reshape", [scale, shape], [row_scale], f"{name}_scale_Reshape"),
    ]
    graph.place_after_producer(-1, nodes)
    return table_values, row_scale


def scaled_weight(graph: GraphEditor, index: int, weight: np.ndarray, axis: int | None) -> int:
    """An int8 copy of constant ``index`` scaled back to float by ``Mul(Cast(W_q), scale)``, one
    scale per index of ``axis`` (or one); returns the float tensor, which takes the constant's name
    (its readers read it in place of the constant, which goes).

    Both engines compute it once, when they load the model (ONNX Runtime folds Cast and Mul of
    constants but not DequantizeLinear, which it would run on every call, and a Conv whose weight
    is not a constant loses its prepacked kernels: SegFormer's int8 ran 1.7x slower so), and it
    needs no per-axis DequantizeLinear, so it works at any opset.
    """
    name = graph.tensor(index).name
    values, params = quantize_weight(weight, axis)
    quantized = graph.add_constant(f"{name}_quantized", values, DataType.INT8)
    broadcast = [1] * weight.ndim
    if axis is not None:
        broadcast[axis] = -1
    scale = graph.add_constant(f"{name}_scale", params.scale.reshape(broadcast) if axis is not None
                               else np.float32(params.scale[0]), DataType.FLOAT)
    as_float = graph.add_tensor(f"{name}_int8", DataType.FLOAT, weight.shape)
    output = graph.add_tensor(f"{name}_dequantized", DataType.FLOAT, weight.shape)
    graph.swap_names(index, output)
    graph.place_after_producer(-1, [
        graph.new_node("Cast", [quantized], [as_float], f"{name}_Cast",
                       {"to": lite_ir.Attribute(_INT, int(DataType.FLOAT))}),
        graph.new_node("Mul", [as_float, scale], [output], f"{name}_Mul"),
    ])
    return output


def dequantized_weight(graph: GraphEditor, index: int, weight: np.ndarray, axis: int | None) -> int:
    """An int8 copy of constant ``index`` read through one DequantizeLinear (per ``axis``, or per
    tensor); returns the dequantized tensor. The writer stores the group as one int8 tensor."""
    tensor = graph.tensor(index)
    values, params = quantize_weight(weight, axis)
    quantized = graph.add_constant(f"{tensor.name}_quantized", values, DataType.INT8, params)
    per_axis = params.axis is not None
    scale_values = params.scale if per_axis else np.float32(params.scale[0])
    scale = graph.add_constant(f"{tensor.name}_scale", scale_values, DataType.FLOAT)
    # The zero point (0) is written out, as the static quantizer does: then the .lite writer
    # stores the whole group as one int8 tensor (lite.format.qdq).
    zero_values = np.zeros(params.scale.size if per_axis else (), np.int8)
    zero = graph.add_constant(f"{tensor.name}_zero_point", zero_values, DataType.INT8)
    output = graph.add_tensor(f"{tensor.name}_dequantized", DataType.FLOAT, tensor.shape)
    attributes = {"axis": lite_ir.Attribute(_INT, int(params.axis))} if per_axis else {}
    node = graph.new_node("DequantizeLinear", [quantized, scale, zero], [output], f"{tensor.name}_DequantizeLinear",
                          attributes)
    graph.place_after_producer(-1, [node])  # weights are ready before anything runs
    return output
