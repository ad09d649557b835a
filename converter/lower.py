"""Translate the converter's graph IR (``onnx_ir``) into the .lite in-memory model.

The translation is lossless for any ONNX node (https://onnx.ai/onnx/repo-docs/IR.html):

- every tensor of a graph (inputs, initializers, node outputs, outer-scope reads) gets one
  :class:`lite.format.ir.Tensor`; nodes refer to them by index, ``-1`` marks an omitted optional
  input or output (trailing omitted outputs are dropped, as ONNX allows);
- attributes keep their ONNX type: INT/FLOAT/STRING (UTF-8 bytes)/TENSOR/INTS/FLOATS/STRINGS/
  TENSORS; GRAPH(S) hold indices into ``Model.graphs``, where the bodies of If/Loop/Scan are
  appended depth first after the main graph (index 0);
- a subgraph that reads a tensor of an enclosing graph lists it in ``Graph.captures``; a graph whose
  nested subgraph reads from further out captures it as well, so each level can resolve it by name;
- weights become numpy arrays in storage dtype (``lite.format.dtypes``): bfloat16 as uint16
  words, float8 as bytes, 4- and 2-bit types packed low bits first (1-D), strings as an object
  array of bytes;
- symbolic dims stay names, unknown dims are ``None``, unknown rank is ``shape=None``;
- an initializer that is also a graph input (an overridable default) becomes a constant.

ONNX types the .lite tensor table has no field for are kept in metadata rather than dropped: a
value of sequence/optional type is described in ``metadata["lite.value_types"]`` (JSON
``{graph index: {tensor name: type text}}``, type text like ``seq(tensor(float))``), and a
TYPE_PROTO(S) attribute (only ``Optional.type``) becomes a STRING(S) attribute holding that text.
"""

from __future__ import annotations

import json

import numpy as np
import onnx_ir as ir

from converter.errors import ExportError
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType, storage_dtype

VALUE_TYPES_KEY = lite_ir.VALUE_TYPES_KEY


def lower_model(model: ir.Model, metadata: dict[str, str] | None = None) -> lite_ir.Model:
    """Return the .lite form of ``model``; ``metadata`` is merged over the model's own properties."""
    name_unnamed_values(model)
    lowering = _Lowering()
    lowering.lower_graph(model.graph)
    merged = dict(model.metadata_props)
    if lowering.value_types:
        merged[VALUE_TYPES_KEY] = json.dumps(lowering.value_types, sort_keys=True)
    merged.update(metadata or {})
    opsets = {("" if domain == "ai.onnx" else domain): int(v) for domain, v in model.opset_imports.items()}
    return lite_ir.Model(graphs=lowering.graphs, opset_imports=opsets, metadata=merged)


class _Lowering:
    def __init__(self) -> None:
        self.graphs: list[lite_ir.Graph] = []
        self.value_types: dict[str, dict[str, str]] = {}

    def lower_graph(self, graph: ir.Graph) -> tuple[int, list[ir.Value]]:
        """Append ``graph`` (and, after it, its subgraphs); return its index and outer reads."""
        index = len(self.graphs)
        out = lite_ir.Graph(name=graph.name or "")
        self.graphs.append(out)
        table: dict[ir.Value, int] = {}
        captured: list[ir.Value] = []

        def add(value: ir.Value, data: np.ndarray | None = None) -> int:
            table[value] = len(out.tensors)
            out.tensors.append(self._tensor(value, index, data))
            return table[value]

        def resolve(value: ir.Value | None) -> int:
            if value is None:
                return -1
            if value not in table:  # defined in an enclosing graph
                position = add(value)
                out.captures.append(position)
                captured.append(value)
            return table[value]

        for value in graph.inputs:
            const = value.const_value
            if const is None:
                out.inputs.append(add(value))
            else:
                # An initializer also listed as an input (an overridable default, mostly in IR < 4
                # models) becomes a constant: .lite keeps inputs and constants distinct.
                add(value, tensor_data(const, value.name))
        for value in graph.initializers.values():
            if value not in table:
                add(value, tensor_data(value.const_value, value.name))
        nodes = list(graph)
        for node in nodes:
            for value in node.outputs:
                if not _omitted(value):
                    add(value)
        for node in nodes:
            out.nodes.append(self._node(node, resolve, table))
        out.outputs = [resolve(value) for value in graph.outputs]
        return index, captured

    def _node(self, node: ir.Node, resolve, table: dict[ir.Value, int]) -> lite_ir.Node:
        attributes = {}
        for name, attr in node.attributes.items():
            attributes[name] = self._attribute(node, attr, resolve)
        inputs = [resolve(value) for value in node.inputs]
        outputs = [-1 if _omitted(value) else table[value] for value in node.outputs]
        while outputs and outputs[-1] == -1:
            outputs.pop()
        return lite_ir.Node(
            op_type=node.op_type,
            inputs=inputs,
            outputs=outputs,
            attributes=attributes,
            domain=node.domain,
            name=node.name or "",
        )

    def _attribute(self, node: ir.Node, attr: ir.Attr, resolve) -> lite_ir.Attribute:
        kind = attr.type
        value = attr.value
        T = lite_ir.AttributeType
        if attr.is_ref():
            raise ExportError(
                f"node {node.name!r} ({node.op_type}): attribute {attr.name!r} refers to a function "
                "attribute; inline functions before lowering"
            )
        if kind == ir.AttributeType.FLOAT:
            return lite_ir.Attribute(T.FLOAT, float(value))
        if kind == ir.AttributeType.INT:
            return lite_ir.Attribute(T.INT, int(value))
        if kind == ir.AttributeType.STRING:
            return lite_ir.Attribute(T.STRING, _as_bytes(value))
        if kind == ir.AttributeType.FLOATS:
            return lite_ir.Attribute(T.FLOATS, [float(v) for v in value])
        if kind == ir.AttributeType.INTS:
            return lite_ir.Attribute(T.INTS, [int(v) for v in value])
        if kind == ir.AttributeType.STRINGS:
            return lite_ir.Attribute(T.STRINGS, [_as_bytes(v) for v in value])
        if kind == ir.AttributeType.TENSOR:
            return lite_ir.Attribute(T.TENSOR, constant_tensor(value))
        if kind == ir.AttributeType.TENSORS:
            return lite_ir.Attribute(T.TENSORS, [constant_tensor(v) for v in value])
        if kind == ir.AttributeType.GRAPH:
            return lite_ir.Attribute(T.GRAPH, self._subgraph(value, resolve))
        if kind == ir.AttributeType.GRAPHS:
            return lite_ir.Attribute(T.GRAPHS, [self._subgraph(g, resolve) for g in value])
        if kind == ir.AttributeType.TYPE_PROTO:
            return lite_ir.Attribute(T.STRING, type_text(value.type).encode())
        if kind == ir.AttributeType.TYPE_PROTOS:
            return lite_ir.Attribute(T.STRINGS, [type_text(v.type).encode() for v in value])
        raise ExportError(
            f"node {node.name!r} ({node.op_type}): attribute {attr.name!r} of type {kind.name} has no "
            ".lite form; densify sparse tensors before converting"
        )

    def _subgraph(self, graph: ir.Graph, resolve) -> int:
        index, captured = self.lower_graph(graph)
        for value in captured:  # make the outer reads visible at this level too
            resolve(value)
        return index

    def _tensor(self, value: ir.Value, graph_index: int, data: np.ndarray | None) -> lite_ir.Tensor:
        value_type = value.type
        dtype = DataType.UNDEFINED
        if value_type is not None:
            if not isinstance(value_type, ir.TensorType):
                self.value_types.setdefault(str(graph_index), {})[value.name] = type_text(value_type)
            dtype = _lite_dtype(_element_dtype(value_type), value.name)
        shape = _shape(value.shape) if isinstance(value_type, ir.TensorType) or value_type is None else None
        if data is not None:
            # A constant has the shape of its data (a declared type may say less: symbolic dims).
            shape = tuple(int(d) for d in value.const_value.shape)
        return lite_ir.Tensor(
            name=value.name or "",
            dtype=dtype,
            shape=shape,
            data=data,
            doc=value.doc_string or "",
        )


def name_unnamed_values(model: ir.Model) -> None:
    """Give every used but unnamed value (made by a pass) a name unique in the model."""
    graphs = [model.graph, *model.graph.subgraphs()]
    taken: set[str] = set()
    for graph in graphs:
        taken.update(v.name for v in graph.inputs if v.name)
        taken.update(graph.initializers)
        for node in graph:
            taken.update(v.name for v in node.outputs if v.name)
    counter = 0
    for graph in graphs:
        for node in graph:
            for value in node.outputs:
                if value.name or _omitted(value):
                    continue
                while f"_v{counter}" in taken:
                    counter += 1
                value.name = f"_v{counter}"
                taken.add(value.name)


def _omitted(value: ir.Value) -> bool:
    return not value.name and not value.uses() and not value.is_graph_output()


def _as_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def _shape(shape: ir.Shape | None) -> tuple[lite_ir.Dim, ...] | None:
    if shape is None:
        return None
    dims: list[lite_ir.Dim] = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
        else:
            dims.append(dim.value if dim.value is not None else None)
    return tuple(dims)


def _element_dtype(value_type: ir.TypeProtocol) -> ir.DataType:
    while not isinstance(value_type, (ir.TensorType, ir.SparseTensorType)):
        elem = getattr(value_type, "elem_type", None)
        if elem is None:
            return ir.DataType.UNDEFINED
        value_type = elem
    return value_type.dtype


def _lite_dtype(dtype: ir.DataType, what: str) -> DataType:
    try:
        return DataType(int(dtype))
    except ValueError as err:
        raise ExportError(f"tensor {what!r}: element type {dtype.name} has no .lite form") from err


def type_text(value_type: ir.TypeProtocol) -> str:
    """ONNX-style text of a type: ``tensor(float)``, ``seq(tensor(int64))``, ``optional(...)``."""
    if isinstance(value_type, ir.TensorType):
        return f"tensor({_onnx_type_name(value_type.dtype)})"
    if isinstance(value_type, ir.SparseTensorType):
        return f"sparse_tensor({_onnx_type_name(value_type.dtype)})"
    if isinstance(value_type, ir.SequenceType):
        return f"seq({type_text(value_type.elem_type)})"
    if isinstance(value_type, ir.OptionalType):
        return f"optional({type_text(value_type.elem_type)})"
    raise ExportError(f"type {value_type!r} has no .lite form")


def _onnx_type_name(dtype: ir.DataType) -> str:
    return dtype.name.lower() if dtype != ir.DataType.FLOAT else "float"


def tensor_data(tensor: ir.TensorProtocol, what: str) -> np.ndarray:
    """The values of ``tensor`` as a numpy array in .lite storage dtype (see module docstring)."""
    dtype = _lite_dtype(tensor.dtype, what)
    shape = tuple(int(d) for d in tensor.shape)
    if dtype == DataType.STRING:
        values = [v if isinstance(v, bytes) else str(v).encode() for v in np.asarray(tensor.numpy()).reshape(-1)]
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)
    if DataType(dtype) in _PACKED:
        # packed bytes, 1-D; the logical shape is on the Tensor
        return np.frombuffer(tensor.tobytes(), dtype=np.uint8)
    storage = storage_dtype(dtype)
    array = np.asarray(tensor.numpy())
    if array.dtype != storage:
        # bfloat16 / float8 arrive as ml_dtypes arrays: the same bytes, viewed as their storage.
        array = np.ascontiguousarray(array).view(storage) if array.dtype.itemsize == storage.itemsize else None
    if array is None:
        array = np.frombuffer(tensor.tobytes(), dtype=storage)
    return array.reshape(shape)  # a view: weights are not copied


_PACKED = {DataType.UINT4, DataType.INT4, DataType.FLOAT4E2M1, DataType.UINT2, DataType.INT2}


def constant_tensor(tensor: ir.TensorProtocol) -> lite_ir.Tensor:
    """A TENSOR attribute value as a constant .lite tensor."""
    name = tensor.name or ""
    return lite_ir.Tensor(
        name=name,
        dtype=_lite_dtype(tensor.dtype, name),
        shape=tuple(int(d) for d in tensor.shape),
        data=tensor_data(tensor, name),
        doc=tensor.doc_string or "",
    )
