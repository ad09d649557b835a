"""Implied QuantizeLinear/DequantizeLinear nodes: the compact on-disk form of QDQ quantization.

A statically quantized graph is mostly QDQ scaffolding (ONNX's QDQ form,
https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html): every weight is an integer
constant read through a DequantizeLinear node with its own scale and zero-point constants, and
every quantized activation passes through a QuantizeLinear → DequantizeLinear pair. On disk
(format 2.0) each such group is one tensor whose QuantParams hold the scale and zero point,
marked with the nodes it stands for (``Tensor.implied_qdq``, see ``docs/format.md``)::

    explicit graph (what engines run)                           stored
    B_quantized ──┐
    B_scale ──────┼─► B_DequantizeLinear ─► B_dequantized ─►    B  int8, quant, DEQUANTIZE
    B_zero_point ─┘

    B ─► B_QuantizeLinear ─► B_quantized ─► B_DequantizeLinear ─► B_dequantized ─►
         (both nodes read B_scale and B_zero_point)             B  float, quant, QUANTIZE_DEQUANTIZE

Stored readers of B read ``B_dequantized`` once expanded. :func:`expand` (the reader) writes the
nodes and tensors out under those names; :func:`compact` (the writer) replaces a group by its
tensor only when :func:`expand` gives the group back exactly (same names, types, shapes, data,
attributes; only positions in the tensor and node lists may differ), and keeps everything else
explicit. The names are the ones :mod:`converter.quantize.static` gives its QDQ nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from lite.errors import ModelFormatError
from lite.format import ir
from lite.format.dtypes import DataType


class ImpliedQdq(IntEnum):
    """``Tensor.implied_qdq`` of schema/model.fbs."""

    NONE = 0
    DEQUANTIZE = 1
    QUANTIZE_DEQUANTIZE = 2


QUANTIZED, SCALE, ZERO_POINT, DEQUANTIZED = "_quantized", "_scale", "_zero_point", "_dequantized"
QUANTIZE_NODE, DEQUANTIZE_NODE = "_QuantizeLinear", "_DequantizeLinear"

# Integer types a DequantizeLinear reads, with the (bits, signed) their QuantParams must state.
_DEQUANTIZABLE = {
    DataType.INT8: (8, True), DataType.UINT8: (8, False), DataType.INT16: (16, True),
    DataType.UINT16: (16, False), DataType.INT32: (32, True),
}
# The type QuantizeLinear produces for (bits, signed): the type of its zero point.
_QUANTIZED_TYPE = {(8, True): DataType.INT8, (8, False): DataType.UINT8,
                   (16, True): DataType.INT16, (16, False): DataType.UINT16}
_NUMPY = {DataType.INT8: np.int8, DataType.UINT8: np.uint8, DataType.INT16: np.int16,
          DataType.UINT16: np.uint16, DataType.INT32: np.int32}


def implied_problem(tensor: ir.Tensor, kind: ImpliedQdq) -> str | None:
    """Why ``tensor`` cannot carry ``kind`` (None: it can). Shared by the writer and the reader."""
    quant = tensor.quant
    if kind == ImpliedQdq.NONE:
        return None
    if not tensor.name:
        return "implies QDQ nodes, which are named after it, but has no name"
    if quant is None:
        return "implies QDQ nodes but has no quantization parameters"
    if quant.block_size:
        return "implies QDQ nodes, which need per-tensor or per-axis parameters, not per-block"
    if quant.zero_point.size != quant.scale.size:
        return f"has {quant.scale.size} scales but {quant.zero_point.size} zero points"
    if kind == ImpliedQdq.DEQUANTIZE:
        if tensor.data is None:
            return "implies a DequantizeLinear of a constant but has no data"
        if tensor.dtype not in _DEQUANTIZABLE:
            return f"implies a DequantizeLinear, which does not read {tensor.dtype.name} (int8/16/32, uint8/16 only)"
        if _DEQUANTIZABLE[tensor.dtype] != (quant.bits, quant.signed):
            signed = "signed" if quant.signed else "unsigned"
            return f"is {tensor.dtype.name} but its quantization parameters say {quant.bits}-bit {signed}"
        integer = tensor.dtype
    else:
        if tensor.data is not None or tensor.dtype != DataType.FLOAT:
            return "implies a QuantizeLinear, which needs a FLOAT value computed at run time"
        integer = _QUANTIZED_TYPE.get((quant.bits, quant.signed))
        if integer is None:
            return f"implies a QuantizeLinear to {quant.bits} bits; 8- and 16-bit only"
    limits = np.iinfo(_NUMPY[integer])
    if quant.zero_point.size and (quant.zero_point.min() < limits.min or quant.zero_point.max() > limits.max):
        return f"has zero points outside the range of {integer.name}"
    return None


def integer_type(tensor: ir.Tensor, kind: ImpliedQdq) -> DataType:
    """The type of the implied integer tensor (and its zero point)."""
    if kind == ImpliedQdq.DEQUANTIZE:
        return tensor.dtype
    return _QUANTIZED_TYPE[(tensor.quant.bits, tensor.quant.signed)]


# ----- reading ------------------------------------------------------------------------------------


def expand(graph: ir.Graph, implied: dict[int, ImpliedQdq]) -> ir.Graph:
    """The explicit graph of a stored one; ``implied``: stored tensor index → its implied nodes.

    The annotations must already be valid (:func:`implied_problem`; a QUANTIZE_DEQUANTIZE value
    is a graph input or a node output; none is a graph output). Implied tensors are appended; a
    DequantizeLinear of a constant runs right before the first node that reads it (at the end when
    none does), a QuantizeLinear/DequantizeLinear pair right after the node producing the value
    (first, for graph inputs). Raises :class:`ModelFormatError` when an implied name is taken.
    """
    tensors = list(graph.tensors)
    implied_by: dict[int, str] = {}  # position in ``tensors`` → stored name of the tensor implying it
    read_as: dict[int, int] = {}  # stored index → index of the dequantized value its readers read
    before: dict[int, list[ir.Node]] = {}  # stored index → nodes run before its first reader
    after: dict[int, list[ir.Node]] = {}  # stored index → nodes run right after it is produced
    for index in sorted(implied):
        first_new = len(tensors)
        output, nodes = _write_out(tensors, index, implied[index])
        implied_by.update((position, graph.tensors[index].name) for position in range(first_new, len(tensors)))
        implied_by[index] = graph.tensors[index].name
        read_as[index] = output
        (before if implied[index] == ImpliedQdq.DEQUANTIZE else after)[index] = nodes
    _check_names(tensors, implied_by, graph.name)
    nodes: list[ir.Node] = []
    for index in graph.inputs:
        nodes.extend(after.pop(index, []))
    for node in graph.nodes:
        for index in node.inputs:
            nodes.extend(before.pop(index, []))
        nodes.append(ir.Node(node.op_type, [read_as.get(i, i) for i in node.inputs], list(node.outputs),
                             node.attributes, node.domain, node.name))
        for index in node.outputs:
            nodes.extend(after.pop(index, []))
    for pending in before.values():  # constants nothing reads
        nodes.extend(pending)
    return ir.Graph(graph.name, tensors, nodes, list(graph.inputs), list(graph.outputs), list(graph.captures))


def _write_out(tensors: list[ir.Tensor], index: int, kind: ImpliedQdq) -> tuple[int, list[ir.Node]]:
    """Append the implied tensors of ``tensors[index]``; return the index its readers read and the
    implied nodes."""
    stored = tensors[index]
    base, quant = stored.name, stored.quant
    integer = integer_type(stored, kind)
    parameter_shape: tuple[int, ...] = () if quant.axis is None else (quant.scale.size,)
    scale = ir.Tensor(base + SCALE, DataType.FLOAT, parameter_shape, quant.scale.reshape(parameter_shape))
    zero_point = ir.Tensor(base + ZERO_POINT, integer, parameter_shape,
                           quant.zero_point.astype(_NUMPY[integer]).reshape(parameter_shape))
    dequantized = ir.Tensor(base + DEQUANTIZED, DataType.FLOAT, stored.shape)

    def attributes() -> dict[str, ir.Attribute]:
        return {} if quant.axis is None else {"axis": ir.Attribute(ir.AttributeType.INT, quant.axis)}

    def append(tensor: ir.Tensor) -> int:
        tensors.append(tensor)
        return len(tensors) - 1

    if kind == ImpliedQdq.DEQUANTIZE:
        tensors[index] = ir.Tensor(base + QUANTIZED, integer, stored.shape, stored.data, quant, stored.doc)
        scale_index, zero_index, output = append(scale), append(zero_point), append(dequantized)
        node = ir.Node("DequantizeLinear", [index, scale_index, zero_index], [output], attributes(),
                       name=base + DEQUANTIZE_NODE)
        return output, [node]
    tensors[index] = ir.Tensor(base, DataType.FLOAT, stored.shape, doc=stored.doc)
    scale_index, zero_index = append(scale), append(zero_point)
    quantized = append(ir.Tensor(base + QUANTIZED, integer, stored.shape, quant=quant))
    output = append(dequantized)
    quantize = ir.Node("QuantizeLinear", [index, scale_index, zero_index], [quantized], attributes(),
                       name=base + QUANTIZE_NODE)
    dequantize = ir.Node("DequantizeLinear", [quantized, scale_index, zero_index], [output], attributes(),
                         name=base + DEQUANTIZE_NODE)
    return output, [quantize, dequantize]


def _check_names(tensors: list[ir.Tensor], implied_by: dict[int, str], graph_name: str) -> None:
    seen: dict[str, int] = {}
    for position, tensor in enumerate(tensors):
        if tensor.name in seen:
            culprit = implied_by.get(position, implied_by.get(seen[tensor.name]))
            raise ModelFormatError(
                f"graph {graph_name!r}: the QDQ nodes implied by tensor {culprit!r} need a tensor named "
                f"{tensor.name!r}, but that name is already taken"
            )
        seen[tensor.name] = position


# ----- writing ------------------------------------------------------------------------------------


@dataclass
class _Group:
    """One QDQ group of the explicit graph and its stored tensor."""

    kind: ImpliedQdq
    stored_index: int  # the explicit tensor whose position the stored tensor takes (q or x)
    stored: ir.Tensor
    dequantized: int  # the explicit tensor the group's readers read
    nodes: tuple[int, ...]  # node positions
    dropped: tuple[int, ...]  # explicit tensors with no stored counterpart


class _Uses:
    """Where each tensor is read (node position, input slot) and which nodes produce it."""

    def __init__(self, graph: ir.Graph) -> None:
        self.reads: dict[int, list[tuple[int, int]]] = {}
        self.producer: dict[int, int] = {}
        for position, node in enumerate(graph.nodes):
            for slot, index in enumerate(node.inputs):
                self.reads.setdefault(index, []).append((position, slot))
            for index in node.outputs:
                self.producer.setdefault(index, position)
        self.boundary = set(graph.inputs) | set(graph.outputs) | set(graph.captures)

    def only(self, index: int, *reads: tuple[int, int]) -> bool:
        return sorted(self.reads.get(index, [])) == sorted(reads)

    def first_reader(self, index: int) -> int:
        return min((position for position, _ in self.reads.get(index, [])), default=1 << 62)


def compact(graph: ir.Graph) -> tuple[ir.Graph, dict[int, ImpliedQdq]]:
    """The stored form of ``graph`` and its annotations (stored tensor index → implied nodes).

    Every QDQ group that :func:`expand` gives back exactly is replaced by its stored tensor; the
    other tensors and nodes keep their relative order, so compacting an expanded graph gives the
    same stored graph again.
    """
    uses = _Uses(graph)
    names = {tensor.name for tensor in graph.tensors}
    groups: list[_Group] = []
    claimed: set[int] = set()
    for position, node in enumerate(graph.nodes):
        if node.op_type == "DequantizeLinear":
            group = _dequantize_group(graph, position, uses, names)
        elif node.op_type == "QuantizeLinear":
            group = _quantize_dequantize_group(graph, position, uses)
        else:
            continue
        if isinstance(group, str):
            continue
        members = {group.stored_index, group.dequantized, *group.dropped}
        if members & claimed:
            continue  # a value quantized twice: the first group wins, the second stays explicit
        claimed |= members
        groups.append(group)
    if not groups:
        return graph, {}
    return _stored_graph(graph, groups)


def _stored_graph(graph: ir.Graph, groups: list[_Group]) -> tuple[ir.Graph, dict[int, ImpliedQdq]]:
    dropped_tensors = {index for group in groups for index in (*group.dropped, group.dequantized)}
    dropped_nodes = {position for group in groups for position in group.nodes}
    keep = [index for index in range(len(graph.tensors)) if index not in dropped_tensors]
    renumber = {old: new for new, old in enumerate(keep)}
    for group in groups:
        renumber[group.dequantized] = renumber[group.stored_index]
    tensors = list(graph.tensors)
    for group in groups:
        tensors[group.stored_index] = group.stored

    def remap(indices: list[int]) -> list[int]:
        return [renumber[i] if i >= 0 else i for i in indices]

    nodes = [
        ir.Node(node.op_type, remap(node.inputs), remap(node.outputs), node.attributes, node.domain, node.name)
        for position, node in enumerate(graph.nodes) if position not in dropped_nodes
    ]
    stored = ir.Graph(graph.name, [tensors[i] for i in keep], nodes, remap(graph.inputs), remap(graph.outputs),
                      remap(graph.captures))
    return stored, {renumber[group.stored_index]: group.kind for group in groups}


def _parameters_match(graph: ir.Graph, scale: int, zero_point: int, quant: ir.QuantParams,
                      integer: DataType) -> bool:
    """``scale`` and ``zero_point`` are the constants :func:`expand` makes from ``quant``."""
    shape = () if quant.axis is None else (quant.scale.size,)
    s, z = graph.tensors[scale], graph.tensors[zero_point]
    if not (_plain(s, DataType.FLOAT, shape) and _plain(z, integer, shape)) or s.data is None or z.data is None:
        return False
    scale_data, zero_data = np.asarray(s.data), np.asarray(z.data)
    return (
        scale_data.dtype == np.float32 and scale_data.tobytes() == quant.scale.astype(np.float32).tobytes()
        and zero_data.dtype == _NUMPY[integer]
        and np.array_equal(zero_data.reshape(-1).astype(np.int64), quant.zero_point)
    )


def _plain(tensor: ir.Tensor, dtype: DataType, shape) -> bool:
    """A tensor :func:`expand` would make: this type and shape, no quantization parameters, no doc."""
    return tensor.dtype == dtype and tensor.shape == shape and tensor.quant is None and not tensor.doc


def _node_matches(node: ir.Node, op_type: str, name: str, quant: ir.QuantParams) -> bool:
    if node.op_type != op_type or node.domain != "" or node.name != name or len(node.outputs) != 1:
        return False
    if quant.axis is None:
        return not node.attributes
    axis = node.attributes.get("axis")
    return (set(node.attributes) == {"axis"} and axis.type == ir.AttributeType.INT
            and int(axis.value) == quant.axis)


def _dequantize_group(graph: ir.Graph, position: int, uses: _Uses, names: set[str]) -> _Group | str:
    """``B_quantized`` (a constant) → DequantizeLinear → ``B_dequantized``: stored as B, DEQUANTIZE."""
    node = graph.nodes[position]
    if len(node.inputs) != 3 or min(node.inputs) < 0 or len(node.outputs) != 1 or node.outputs[0] < 0:
        return "not DequantizeLinear(x, scale, zero_point) -> y"
    quantized, scale, zero_point = node.inputs
    output = node.outputs[0]
    source = graph.tensors[quantized]
    if source.quant is None or source.data is None or not source.name.endswith(QUANTIZED):
        return "x is not a constant named *_quantized with quantization parameters"
    base = source.name[: -len(QUANTIZED)]
    stored = ir.Tensor(base, source.dtype, source.shape, source.data, source.quant, source.doc)
    problem = implied_problem(stored, ImpliedQdq.DEQUANTIZE)
    if problem is not None:
        return f"x {problem}"
    if not base or base in names:
        return f"the stored name {base!r} is taken"
    if {quantized, scale, zero_point, output} & uses.boundary:
        return "a graph input, output or capture"
    if not (uses.only(quantized, (position, 0)) and uses.only(scale, (position, 1))
            and uses.only(zero_point, (position, 2))):
        return "x, scale or zero point is read by another node too"
    if not _node_matches(node, "DequantizeLinear", base + DEQUANTIZE_NODE, source.quant):
        return "the node's name, domain or attributes differ from the implied node's"
    if not _parameters_match(graph, scale, zero_point, source.quant, source.dtype):
        return "scale or zero point differ from x's quantization parameters (or are named differently)"
    if (graph.tensors[scale].name, graph.tensors[zero_point].name) != (base + SCALE, base + ZERO_POINT):
        return "scale or zero point are named differently"
    y = graph.tensors[output]
    if not _plain(y, DataType.FLOAT, source.shape) or y.data is not None or y.name != base + DEQUANTIZED:
        return "y is not the implied FLOAT tensor"
    if uses.producer.get(output) != position or uses.first_reader(output) < position:
        return "y is produced twice or read before the node"
    return _Group(ImpliedQdq.DEQUANTIZE, quantized, stored, output, (position,), (scale, zero_point))


def _quantize_dequantize_group(graph: ir.Graph, position: int, uses: _Uses) -> _Group | str:
    """B → QuantizeLinear → ``B_quantized`` → DequantizeLinear → ``B_dequantized``: stored as B,
    QUANTIZE_DEQUANTIZE."""
    quantize = graph.nodes[position]
    if len(quantize.inputs) != 3 or min(quantize.inputs) < 0 or len(quantize.outputs) != 1:
        return "not QuantizeLinear(x, scale, zero_point) -> y"
    value, scale, zero_point = quantize.inputs
    quantized = quantize.outputs[0]
    readers = uses.reads.get(quantized, []) if quantized >= 0 else []
    if len(readers) != 1 or readers[0][1] != 0:
        return "the quantized value has not exactly one reader, a DequantizeLinear"
    second = readers[0][0]
    dequantize = graph.nodes[second]
    if dequantize.inputs != [quantized, scale, zero_point] or len(dequantize.outputs) != 1 or dequantize.outputs[0] < 0:
        return "the DequantizeLinear does not read the same scale and zero point"
    output = dequantize.outputs[0]
    x, q = graph.tensors[value], graph.tensors[quantized]
    base = x.name
    if x.quant is not None or q.quant is None:
        return "x has quantization parameters, or the quantized value has none"
    stored = ir.Tensor(base, x.dtype, x.shape, x.data, q.quant, x.doc)
    problem = implied_problem(stored, ImpliedQdq.QUANTIZE_DEQUANTIZE)
    if problem is not None:
        return f"x {problem}"
    if value in graph.outputs or value in graph.captures or {scale, zero_point, quantized, output} & uses.boundary:
        return "a graph output or capture"
    if value not in graph.inputs and value not in uses.producer:
        return "x is neither a graph input nor a node output"
    if not (uses.only(value, (position, 0)) and uses.only(scale, (position, 1), (second, 1))
            and uses.only(zero_point, (position, 2), (second, 2))):
        return "x, scale or zero point is read by another node too"
    if not (_node_matches(quantize, "QuantizeLinear", base + QUANTIZE_NODE, q.quant)
            and _node_matches(dequantize, "DequantizeLinear", base + DEQUANTIZE_NODE, q.quant)):
        return "a node's name, domain or attributes differ from the implied node's"
    integer = integer_type(stored, ImpliedQdq.QUANTIZE_DEQUANTIZE)
    if not _parameters_match(graph, scale, zero_point, q.quant, integer):
        return "scale or zero point differ from the quantization parameters"
    if (graph.tensors[scale].name, graph.tensors[zero_point].name) != (base + SCALE, base + ZERO_POINT):
        return "scale or zero point are named differently"
    if q.name != base + QUANTIZED or q.dtype != integer or q.shape != x.shape or q.data is not None or q.doc:
        return "the quantized value is not the implied tensor"
    y = graph.tensors[output]
    if not _plain(y, DataType.FLOAT, x.shape) or y.data is not None or y.name != base + DEQUANTIZED:
        return "the dequantized value is not the implied FLOAT tensor"
    if not uses.producer.get(value, -1) < position < second < uses.first_reader(output):
        return "the nodes are not in execution order"
    if uses.producer.get(quantized) != position or uses.producer.get(output) != second:
        return "a value is produced twice"
    return _Group(ImpliedQdq.QUANTIZE_DEQUANTIZE, value, stored, output, (position, second),
                  (scale, zero_point, quantized))
