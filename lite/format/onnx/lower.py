"""Lowering a .lite graph to an in-memory ONNX model (for ONNX Runtime, OpenVINO and ``.onnx`` output).

The .lite node set *is* ONNX's, so lowering is one node to one node, except:

- fused activations (``fused_activation`` attribute) become the activation node again, in the
  forms ONNX Runtime fuses back into its own kernels (Conv+Relu, Conv+Clip, Gemm+Relu, ...);
- the model is stamped with the IR version and opset ONNX Runtime accepts (IR ≤ 11,
  default-domain opset ≤ 26);
- constants of the main graph become *external* initializers: the ONNX model holds only their
  name, type and shape, and the arrays (views of the memory-mapped .lite file) are handed to
  ONNX Runtime's session with ``SessionOptions.add_external_initializers`` (OpenVINO's cache
  writes them beside the model), so weights are not copied into protobuf.

Quantization parameters on tensors are descriptive; the computation is what the nodes say
(QuantizeLinear/DequantizeLinear pairs, QLinearConv, ...), so they need no lowering.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

from lite.errors import UnsupportedOpError
from lite.format import fused_activation, ir
from lite.format.dtypes import DataType, is_subbyte
from lite.format.ir import fresh_name, reads
from lite.format.onnx.graph import node_name
from lite.format.values import tensor_value

MAX_IR_VERSION = 11
MAX_DEFAULT_OPSET = 26
# Weights handed to ONNX Runtime in place (numpy-backed OrtValues, no copy). Only data-like
# types of some size: ONNX Runtime reads small integer tensors (Reshape shapes, Slice starts,
# ...) during shape inference, which it cannot do for external initializers.
_EXTERNAL_TYPES = {DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.INT8, DataType.UINT8}
EXTERNAL_MIN_BYTES = 4096


@dataclass
class Lowered:
    """An ONNX model plus the arrays of its external initializers (name -> array)."""

    model: onnx.ModelProto
    external: dict[str, np.ndarray] = field(default_factory=dict)


def make_ort_compatible(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Stamp ``proto`` with IR ≤ 11 and default-domain opset ≤ 26 (what ONNX Runtime 1.31 and 1.32 load).

    Lowering only the stamp is exact when no op of the model changed between the two opsets;
    otherwise onnx's version converter rewrites the model, and if it cannot, the error says so.
    Returns ``proto`` (modified in place) or a converted copy.
    """
    proto.ir_version = min(proto.ir_version or MAX_IR_VERSION, MAX_IR_VERSION)
    opset = _default_opset(proto)
    if opset <= MAX_DEFAULT_OPSET:
        return proto
    changed = _ops_changed_since(proto, MAX_DEFAULT_OPSET, opset)
    if not changed:
        for entry in proto.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = MAX_DEFAULT_OPSET
        return proto
    try:
        converted = onnx.version_converter.convert_version(proto, MAX_DEFAULT_OPSET)
    except Exception as err:
        raise UnsupportedOpError(
            f"the model uses opset {opset} and ops {sorted(changed)} changed after opset {MAX_DEFAULT_OPSET}, "
            f"which ONNX Runtime 1.31 does not load; onnx's version converter failed ({err}). "
            "Run it on the numpy engine, or export the model at opset <= 26"
        ) from err
    converted.ir_version = min(converted.ir_version, MAX_IR_VERSION)
    return converted


def unique_node_names(graph: onnx.GraphProto, taken: set[str] | None = None) -> None:
    """Rename repeated node names (ONNX allows them, ONNX Runtime refuses to load them; names
    change nothing a node computes), in subgraphs too."""
    taken = set() if taken is None else taken
    for node in graph.node:
        if node.name:
            name, suffix = node.name, 1
            while name in taken:
                name, suffix = f"{node.name}__{suffix}", suffix + 1
            node.name = name
            taken.add(name)
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs):
                unique_node_names(subgraph, taken)


def _default_opset(proto: onnx.ModelProto) -> int:
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 1


def _graph_protos(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _graph_protos(attribute.g)
            for body in attribute.graphs:
                yield from _graph_protos(body)


def _ops_changed_since(proto: onnx.ModelProto, low: int, high: int) -> set[str]:
    changed = set()
    for graph in _graph_protos(proto.graph):
        for node in graph.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            try:
                newest = onnx.defs.get_schema(node.op_type, high, "").since_version
            except onnx.defs.SchemaError:
                changed.add(node.op_type)
                continue
            if newest > low:
                changed.add(node.op_type)
    return changed


def lower_model(model: ir.Model, *, external_weights: bool = True) -> Lowered:
    """The whole .lite model as one ONNX model."""
    graph = model.main
    return lower_nodes(model, graph.nodes, graph.inputs, graph.outputs, external_weights=external_weights)


def lower_nodes(model: ir.Model, nodes: Sequence[ir.Node], inputs: Sequence[int], outputs: Sequence[int], *,
                external_weights: bool = True, name: str | None = None,
                input_types: dict[str, DataType] | None = None) -> Lowered:
    """Nodes of the main graph (a partition segment) as an ONNX model with the given input and output tensors.

    ``input_types`` gives element types for inputs the .lite graph leaves undeclared.
    """
    lowering = _Lowering(model, external_weights, input_types or {})
    graph = lowering.graph(model.main, nodes, inputs, outputs, name or model.main.name, top_level=True)
    opsets = [helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()]
    if not any(o.domain in ("", "ai.onnx") for o in opsets):
        opsets.append(helper.make_opsetid("", MAX_DEFAULT_OPSET))
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="lite", ir_version=_ir_version(opsets))
    for key, value in model.metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    unique_node_names(proto.graph)  # a file may repeat names (ONNX allows it): ONNX Runtime refuses them
    return Lowered(make_ort_compatible(proto), lowering.external)


def _ir_version(opsets: list[onnx.OperatorSetIdProto]) -> int:
    """The lowest IR version the opsets need, at most MAX_IR_VERSION: an opset-17 model stamped IR 11
    was refused by ONNX Runtime before 1.23 (IR 10 at most), which runs it."""
    try:
        needed = helper.find_min_ir_version_for(list(opsets), ignore_unknown=True)
    except (ValueError, KeyError, TypeError):
        return MAX_IR_VERSION
    return min(max(needed, 7), MAX_IR_VERSION)


class _Lowering:
    def __init__(self, model: ir.Model, external_weights: bool, input_types: dict[str, DataType]) -> None:
        self.model = model
        self.external_weights = external_weights
        self.input_types = input_types
        self.taken: dict[int, set[str]] = {}
        self.positions: dict[int, dict[int, int]] = {}  # graph -> node -> position
        try:
            self.value_types = json.loads(model.metadata.get(ir.VALUE_TYPES_KEY, "{}"))
        except ValueError:
            self.value_types = {}
        self.added: dict[int, list[TensorProto]] = {}  # initializers lowering adds (Clip bounds)
        self.external: dict[str, np.ndarray] = {}

    def graph(self, graph: ir.Graph, nodes: Sequence[ir.Node], inputs: Sequence[int], outputs: Sequence[int],
              name: str, top_level: bool) -> onnx.GraphProto:
        used = reads(self.model, graph, nodes) | set(outputs)
        initializers = [self.initializer(graph.tensors[i], top_level) for i in sorted(used)
                        if graph.tensors[i].is_constant]
        lowered_nodes = []
        for node in nodes:
            lowered_nodes.extend(self.node(graph, node))
        initializers.extend(self.added.pop(id(graph), []))
        return helper.make_graph(
            lowered_nodes, name,
            [self.value_info(graph, i, self.input_types.get(graph.tensors[i].name)) for i in inputs],
            [self.value_info(graph, i) for i in outputs],
            initializer=initializers,
            value_info=self.intermediates(graph, nodes, {*inputs, *outputs}) if top_level else None,
        )

    def intermediates(self, graph: ir.Graph, nodes: Sequence[ir.Node], boundary: set[int]) -> list[onnx.ValueInfoProto]:
        """The type and shape the .lite graph records for each tensor the nodes produce inside the graph.

        ONNX Runtime's shape-dependent fusions read them: its own inference loses symbolic sizes
        through Slice, Gather or Expand ("Min(64, s50)"), and without equal shapes on both inputs of an
        Add it fuses no Add + LayerNormalization into SkipLayerNormalization (BERT: 4 of 4 missed).
        Tensors of unknown rank or type, and sequences and optionals, are left to its inference.
        """
        described = self.value_types.get(str(self.model.graphs.index(graph)), {})
        declared = []
        seen = set(boundary)
        for node in nodes:
            for index in node.outputs:
                if index < 0 or index in seen:
                    continue
                seen.add(index)
                tensor = graph.tensors[index]
                if tensor.shape is None or tensor.dtype == DataType.UNDEFINED or tensor.name in described:
                    continue
                declared.append(value_info_of(tensor))
        return declared

    def value_info(self, graph: ir.Graph, index: int, dtype: DataType | None = None) -> onnx.ValueInfoProto:
        tensor = graph.tensors[index]
        described = self.value_types.get(str(self.model.graphs.index(graph)), {}).get(tensor.name)
        if described:  # a sequence or optional value: the .lite tensor table only has its element type
            return helper.make_value_info(tensor.name, type_from_text(described))
        return value_info_of(tensor, dtype)

    def initializer(self, tensor: ir.Tensor, top_level: bool) -> TensorProto:
        if (top_level and self.external_weights and tensor.dtype in _EXTERNAL_TYPES
                and tensor.data.nbytes >= EXTERNAL_MIN_BYTES):
            proto = TensorProto(name=tensor.name, data_type=int(tensor.dtype), dims=list(tensor.shape))
            proto.data_location = TensorProto.EXTERNAL
            # The location is never read: the session receives the array itself.
            for key, value in (("location", "lite-in-memory"), ("offset", "0"), ("length", str(tensor.data.nbytes))):
                entry = proto.external_data.add()
                entry.key, entry.value = key, value
            self.external[tensor.name] = np.ascontiguousarray(tensor.data)
            return proto
        return tensor_proto(tensor, tensor.name)

    def node(self, graph: ir.Graph, node: ir.Node) -> list[onnx.NodeProto]:
        def name_of(index: int) -> str:
            return "" if index < 0 else graph.tensors[index].name

        inputs = [name_of(i) for i in node.inputs]
        outputs = [name_of(i) for i in node.outputs]
        attributes = []
        activation = None
        for attribute_name, attribute in node.attributes.items():
            if attribute_name == fused_activation.ATTRIBUTE:
                activation = attribute.value.decode()
            elif attribute_name != fused_activation.PARAMS_ATTRIBUTE:
                attributes.append(self.attribute(attribute_name, attribute))
        params = ()
        if fused_activation.PARAMS_ATTRIBUTE in node.attributes:
            params = tuple(node.attributes[fused_activation.PARAMS_ATTRIBUTE].value)
        final_output = outputs[0] if outputs else ""
        if activation is not None:
            outputs[0] = self.fresh(graph, f"{final_output}__before_{activation.lower()}")
        positions = self.positions.get(id(graph))
        if positions is None:
            positions = self.positions[id(graph)] = {id(n): i for i, n in enumerate(graph.nodes)}
        proto = onnx.NodeProto(op_type=node.op_type, domain=node.domain, name=node_name(node, positions[id(node)]),
                               input=inputs, output=outputs)
        proto.attribute.extend(attributes)
        if activation is None:
            return [proto]
        weight = graph.tensors[node.inputs[1]] if len(node.inputs) > 1 and node.inputs[1] >= 0 else None
        dtype = DataType.FLOAT16 if weight is not None and weight.dtype == DataType.FLOAT16 else DataType.FLOAT
        opset = self.model.opset_imports.get("", self.model.opset_imports.get("ai.onnx", MAX_DEFAULT_OPSET))
        name = self.fresh(graph, f"{proto.name}/{activation}")
        initializers = self.added.setdefault(id(graph), [])
        return [proto, *activation_nodes(activation, params, outputs[0], final_output, name, opset, dtype, initializers)]

    def fresh(self, graph: ir.Graph, base: str) -> str:
        """A value or node name no tensor of ``graph`` (nor an earlier fresh name) uses."""
        return fresh_name(base, self.taken.setdefault(id(graph), {t.name for t in graph.tensors}))

    def attribute(self, name: str, attribute: ir.Attribute) -> AttributeProto:
        kind, value = attribute.type, attribute.value
        proto = AttributeProto(name=name, type=int(kind))
        T = ir.AttributeType
        if kind == T.FLOAT:
            proto.f = value
        elif kind == T.INT:
            proto.i = value
        elif kind == T.STRING:
            proto.s = value
        elif kind == T.TENSOR:
            proto.t.CopyFrom(tensor_proto(value, value.name))
        elif kind == T.GRAPH:
            proto.g.CopyFrom(self.subgraph(value))
        elif kind == T.FLOATS:
            proto.floats.extend(value)
        elif kind == T.INTS:
            proto.ints.extend(value)
        elif kind == T.STRINGS:
            proto.strings.extend(value)
        elif kind == T.TENSORS:
            proto.tensors.extend(tensor_proto(t, t.name) for t in value)
        elif kind == T.GRAPHS:
            proto.graphs.extend(self.subgraph(g) for g in value)
        return proto

    def subgraph(self, index: int) -> onnx.GraphProto:
        body = self.model.graphs[index]
        return self.graph(body, body.nodes, body.inputs, body.outputs, body.name, top_level=False)


def activation_nodes(activation: str, params: Sequence[float], source: str, target: str, name: str,
                     opset: int, dtype: DataType = DataType.FLOAT,
                     initializers: list[TensorProto] | None = None) -> list[onnx.NodeProto]:
    """The ONNX form of a fused activation (:mod:`lite.format.fused_activation`), reading
    ``source`` and writing ``target``.

    Clip's bounds are attributes before opset 11 and, after, initializers of the layer's element
    type, appended to ``initializers``.
    """
    if activation == "Clip" and opset >= 11:
        bounds = [f"{name}/min", f"{name}/max"]
        if initializers is not None:
            initializers.extend(helper.make_tensor(bound, int(dtype), [], [value]) for bound, value in zip(bounds, params))
        return [helper.make_node("Clip", [source, *bounds], [target], name=name)]
    if activation == "Silu":
        gate = f"{name}/sigmoid"
        return [helper.make_node("Sigmoid", [source], [gate], name=gate),
                helper.make_node("Mul", [source, gate], [target], name=name)]
    if activation == "HardSwish" and opset < 14:
        # No HardSwish operator before opset 14 (the converter fuses the forms such models write
        # it in): x · HardSigmoid(x; 1/6, 1/2), its definition.
        gate = f"{name}/hard_sigmoid"
        return [helper.make_node("HardSigmoid", [source], [gate], name=gate, alpha=1 / 6, beta=0.5),
                helper.make_node("Mul", [source, gate], [target], name=name)]
    known = fused_activation.ACTIVATIONS.get(activation)  # the reader refuses unknown names
    attributes = known.onnx_attributes(params) if known is not None else {}
    return [helper.make_node(activation, [source], [target], name=name, **attributes)]


def type_from_text(text: str) -> onnx.TypeProto:
    """``tensor(float)``, ``seq(tensor(int64))``, ``optional(seq(tensor(float)))`` as a TypeProto."""
    text = text.strip()
    if text.startswith("seq(") and text.endswith(")"):
        return helper.make_sequence_type_proto(type_from_text(text[4:-1]))
    if text.startswith("optional(") and text.endswith(")"):
        return helper.make_optional_type_proto(type_from_text(text[9:-1]))
    if text.startswith("tensor(") and text.endswith(")"):
        name = text[7:-1].upper()
        element = {"FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "STRING": "STRING", "BOOL": "BOOL"}.get(name, name)
        return helper.make_tensor_type_proto(int(getattr(DataType, element)), None)
    raise ValueError(f"cannot read the value type {text!r}")


def value_info_of(tensor: ir.Tensor, dtype: DataType | None = None) -> onnx.ValueInfoProto:
    shape = None if tensor.shape is None else list(tensor.shape)
    dtype = tensor.dtype if dtype is None or tensor.dtype != DataType.UNDEFINED else dtype
    elem_type = int(dtype)
    if elem_type == 0:
        return helper.make_value_info(tensor.name, onnx.TypeProto())
    return helper.make_tensor_value_info(tensor.name, elem_type, shape)


def tensor_proto(tensor: ir.Tensor, name: str) -> TensorProto:
    """A constant as an inline TensorProto (raw little-endian bytes, as the .lite file stores them)."""
    proto = TensorProto(name=name, data_type=int(tensor.dtype), dims=list(tensor.shape))
    if tensor.dtype == DataType.STRING:
        proto.string_data.extend(v if isinstance(v, bytes) else str(v).encode() for v in tensor.data.reshape(-1))
    elif is_subbyte(tensor.dtype) or tensor.dtype in (DataType.BFLOAT16,) or tensor.dtype.name.startswith("FLOAT8"):
        proto.raw_data = np.ascontiguousarray(tensor.data).tobytes()
    else:
        proto.raw_data = np.ascontiguousarray(tensor_value(tensor)).astype(tensor.data.dtype.newbyteorder("<")).tobytes()
    return proto
