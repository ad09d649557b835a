"""Translate a MINDIR main graph into an ONNX model (opset 17) that the converter's passes take.

Walk (reference §1.4, §1.5):

* ``GraphProto.parameter`` (weights, ``"<graph>:<name>"``) become initializers named after the
  cell path (``conv1.weight``, the part after the first ``:``);
* ``GraphProto.input`` become graph inputs (dims of -1 become symbolic);
* nodes are visited in dependency order: ``Constant`` nodes give constants; every other node is
  a primitive resolved from its ``op_type`` — ``REF::<Name>:<uid>`` looks up
  ``ModelProto.primitives`` (2.x), a bare name is the primitive itself with its attributes on the
  node (1.x; a ``S_Prim_`` prefix marks a DoSignature primitive) — and translated by
  :data:`converter.mindspore.primitives.PRIMITIVES`; the node attribute ``shape`` gives the
  output dtype/shape;
* ``GraphProto.output`` names the returned values (tuples are flattened into several outputs).

Primitives that cannot be translated are collected and reported together
(:class:`~converter.errors.UnsupportedOpsError`), or, with ``allow_custom``, kept as custom
nodes in the ``mindspore`` domain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from converter.errors import UnsupportedOpsError
from converter.mindspore.call import PrimitiveCall, to_tensor
from converter.mindspore.errors import MindIRFormatError
from converter.mindspore.graph import (
    ConstValue,
    OnnxGraph,
    Shape,
    TensorValue,
    TranslationError,
    TupleValue,
    Value,
)
from converter.mindspore.primitives import PRIMITIVES
from converter.mindspore.values import (
    MONAD,
    TENSORS,
    TUPLE,
    DType,
    Monad,
    attribute_value,
    checked_dims,
    numpy_dtype,
    tensor_array,
)

OPSET = 17
IR_VERSION = 8
CUSTOM_DOMAIN = "mindspore"
REF = "REF::"
IGNORED_NODE_ATTRIBUTES = {"shape", "input_names", "output_names"}


def short_name(name: str) -> str:
    """``"<graph>:conv1.weight"`` -> ``conv1.weight`` (MindSpore strips up to the first ``:``)."""
    return name.split(":", 1)[1] if ":" in name else name


class GraphTranslator:
    def __init__(
        self, model: Any, base_dir: Path | None, what: str, allow_custom: bool = False
    ) -> None:
        self.model = model
        self.base_dir = base_dir
        self.what = what
        self.allow_custom = allow_custom
        self.graph = OnnxGraph()
        self.values: dict[str, Value] = {}
        self.problems: list[tuple[str, str, str]] = []
        self.custom: list[tuple[str, str, str]] = []
        self.primitives = {p.name: p for p in model.primitives}
        self.functions = {g.name for g in model.functions}

    # ---------------------------------------------------------------- driver
    def translate(self) -> onnx.ModelProto:
        main = self.model.graph
        for proto in main.parameter:
            self._parameter(proto)
        inputs = [self._input(info) for info in main.input]
        for node in self._ordered(main):
            self._node(node)
        if self.problems:
            listing = "\n".join(f"  {name}: {prim} — {reason}" for name, prim, reason in self.problems)
            raise UnsupportedOpsError(
                f"{self.what}: {len(self.problems)} MINDIR node(s) cannot be translated:\n{listing}\n"
                "Pass --allow-custom (allow_custom=True) to keep them as custom nodes in the "
                f"'{CUSTOM_DOMAIN}' domain for the runtime's custom-op mechanism.",
                self.problems,
            )
        outputs = self._outputs(main)
        return self._model(main.name, inputs, outputs)

    def _ordered(self, graph: Any) -> list[Any]:
        """Nodes in dependency order (writers emit them ordered; this tolerates any order)."""
        produced = {out for node in graph.node for out in node.output}
        known = set(self.values)
        pending, ordered = list(graph.node), []
        while pending:
            waiting = []
            for node in pending:
                if all(name in known or name not in produced for name in node.input):
                    ordered.append(node)
                    known.update(node.output)
                else:
                    waiting.append(node)
            if len(waiting) == len(pending):
                names = ", ".join(n.name or n.output[0] if n.output else "?" for n in waiting[:5])
                raise MindIRFormatError(f"{self.what}: nodes depend on each other in a cycle ({names}); the file is damaged")
            pending = waiting
        return ordered

    # ---------------------------------------------------------------- graph pieces
    def _parameter(self, proto: Any) -> None:
        where = f"{self.what}: parameter {proto.name!r}"
        array = tensor_array(proto, where, self.base_dir)
        name = proto.ref_key or short_name(proto.name)
        self.values[proto.name] = self.graph.initializer(array, name)

    def _input(self, info: Any) -> onnx.ValueInfoProto:
        name = self.graph.fresh(short_name(info.name))
        where = f"{self.what}: input {info.name!r}"
        if not info.tensor:
            raise MindIRFormatError(f"{where}: has no tensor type; only tensor inputs are supported")
        tensor = info.tensor[0]
        dtype = numpy_dtype(tensor.data_type, where).newbyteorder("=")
        dims: list[int | str] = []
        for axis, dim in enumerate(tensor.dims):
            dims.append(int(dim) if dim >= 0 else ("batch" if axis == 0 else f"{name}_d{axis}"))
        shape = tuple(d if isinstance(d, int) else None for d in dims)
        self.values[info.name] = TensorValue(name, dtype, shape)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), dims)

    def _node(self, node: Any) -> None:
        label = node.name or (node.output[0] if node.output else "(unnamed node)")
        if not node.output:
            raise MindIRFormatError(f"{self.what}: node {label!r} has no output; the file is damaged")
        if node.op_type == "Constant":
            self._constant(node, label)
            return
        try:
            primitive, attributes = self._resolve(node, label)
        except TranslationError as err:
            self._problem(node, label, node.op_type, err.reason)
            return
        graphs = [name for name in node.input if name not in self.values and name in self.functions]
        if graphs:  # Partial/Switch of sub-graphs: MindSpore's control flow, kept as graphs
            self._problem(node, label, primitive, f"takes the sub-graph {graphs[0]!r} (control flow: an if or "
                          "while on a tensor's value); only fully inlined graphs are translated")
            return
        inputs = [self._input_value(name, label) for name in node.input]
        call = PrimitiveCall(
            graph=self.graph,
            node_name=label,
            base=self._base(node, primitive),
            primitive=primitive,
            inputs=inputs,
            attributes=attributes,
            outputs_info=self._outputs_info(node, label),
        )
        translator = PRIMITIVES.get(primitive)
        try:
            if translator is None:
                raise TranslationError(f"no translation for the MindSpore primitive {primitive!r}")
            self.values[node.output[0]] = translator(call)
        except TranslationError as err:
            self._problem(node, label, primitive, err.reason, call)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as err:
            # malformed attribute values (a tuple where an int belongs...): name the node, go on
            self._problem(node, label, primitive, f"malformed attributes ({type(err).__name__}: {err})", call)

    def _constant(self, node: Any, label: str) -> None:
        values = [a for a in node.attribute if a.name == "value"]
        if not values:
            raise MindIRFormatError(f"{self.what}: Constant node {label!r} has no 'value' attribute")
        value = attribute_value(values[0], f"{self.what}: Constant {label!r}", self.base_dir)
        self.values[node.output[0]] = MONAD if isinstance(value, Monad) else ConstValue(value)

    def _input_value(self, name: str, label: str) -> Value:
        if name not in self.values:
            raise MindIRFormatError(
                f"{self.what}: node {label!r} reads {name!r}, which no node, parameter or input defines; "
                "the file is damaged"
            )
        return self.values[name]

    def _resolve(self, node: Any, label: str) -> tuple[str, dict[str, Any]]:
        """(primitive name, attributes) of a node, for both the 2.x and the 1.x encodings."""
        where = f"{self.what}: node {label!r}"
        node_attrs = {
            a.name: attribute_value(a, where, self.base_dir)
            for a in node.attribute
            if a.name not in IGNORED_NODE_ATTRIBUTES
        }
        op_type = node.op_type
        if not op_type.startswith(REF):
            name = op_type.removeprefix("S_Prim_")
            if not name:
                raise MindIRFormatError(f"{where}: has an empty op_type; the file is damaged")
            return name, node_attrs
        key = op_type[len(REF) :]
        if key in self.primitives:
            proto = self.primitives[key]
            attrs = {
                a.name: attribute_value(a, f"{where} (primitive {key})", self.base_dir)
                for a in proto.attribute
                if a.name not in IGNORED_NODE_ATTRIBUTES
            }
            attrs.update(node_attrs)
            return proto.op_type or key.split(":")[0], attrs
        if key in self.functions:
            raise TranslationError(
                f"calls the sub-graph {key!r}; only fully inlined graphs are translated (export in GRAPH_MODE)"
            )
        raise TranslationError(
            f"refers to {key!r}, which is not in ModelProto.primitives (a call of a node value or a "
            "meta function graph is not translated)"
        )

    def _outputs_info(self, node: Any, label: str) -> list[tuple[np.dtype | None, Shape | None]]:
        for attr in node.attribute:
            if attr.name == "shape":
                return _shape_info(attr)
        return []

    def _base(self, node: Any, primitive: str) -> str:
        scope = node.domain
        scope = scope.removeprefix("Default/")
        return scope or short_name(node.name) or primitive

    # ---------------------------------------------------------------- problems, custom nodes
    def _problem(self, node: Any, label: str, primitive: str, reason: str, call: PrimitiveCall | None = None) -> None:
        if self.allow_custom and call is not None:
            self.values[node.output[0]] = self._custom_node(call)
            self.custom.append((label, primitive, reason))
            return
        self.problems.append((label, primitive, reason))
        self.values[node.output[0]] = TensorValue(self.graph.fresh(f"{label}/unavailable"))

    def _custom_node(self, call: PrimitiveCall) -> Value:
        inputs: list[TensorValue] = []
        for value in call.inputs:
            for item in _flatten(value):
                if isinstance(item, Monad) or (isinstance(item, ConstValue) and not _is_numeric(item.value)):
                    continue
                inputs.append(to_tensor(self.graph, item, f"{call.base}/const"))
        attrs = {k: v for k, v in ((k, _onnx_attribute(v)) for k, v in call.attributes.items()) if v is not None}
        count = max(len(call.outputs_info), 1)
        outputs = self.graph.add_outputs(call.primitive, inputs, call.base, count, CUSTOM_DOMAIN, **attrs)
        typed = [TensorValue(o.name, *call.out(i)) for i, o in enumerate(outputs)]
        return typed[0] if count == 1 else TupleValue(tuple(typed))

    # ---------------------------------------------------------------- outputs, model
    def _outputs(self, main: Any) -> list[onnx.ValueInfoProto]:
        results: list[TensorValue] = []
        for info in main.output:
            value = self._input_value(info.name, "graph output")
            for item in _flatten(value):
                if isinstance(item, Monad):
                    continue
                results.append(to_tensor(self.graph, item, "output_const"))
        if not results:
            raise MindIRFormatError(f"{self.what}: the graph returns no tensor")
        names = ["output"] if len(results) == 1 else [f"output_{i}" for i in range(len(results))]
        produced = {out: node for node in self.graph.nodes for out in node.output}
        renamed: set[str] = set()
        infos = []
        for value, name in zip(results, names):
            name = name if name not in self.graph.used_names else self.graph.fresh(name)
            self.graph.used_names.add(name)
            if value.name in produced and value.name not in renamed:
                self._rename(value.name, name)
                renamed.add(value.name)
            else:
                self.graph.add("Identity", [value], name)
                self.graph.nodes[-1].output[0] = name
            elem = helper.np_dtype_to_tensor_dtype(value.dtype) if value.dtype is not None else onnx.TensorProto.FLOAT
            shape = None if value.shape is None else [d if d is not None else None for d in value.shape]
            if shape and shape[0] is None:
                shape[0] = "batch"
            infos.append(helper.make_tensor_value_info(name, elem, shape))
        return infos

    def _rename(self, old: str, new: str) -> None:
        for node in self.graph.nodes:
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new
            for i, name in enumerate(node.output):
                if name == old:
                    node.output[i] = new

    def _model(self, name: str, inputs: list, outputs: list) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.graph.nodes, short_name(name) or "mindir", inputs, outputs, self.graph.tensor_protos()
        )
        opsets = [helper.make_opsetid("", OPSET)]
        opsets += [helper.make_opsetid(domain, 1) for domain in sorted(self.graph.custom_domains)]
        model = helper.make_model(
            graph,
            opset_imports=opsets,
            producer_name=self.model.producer_name or "MindSpore",
            producer_version=self.model.model_version or self.model.producer_version,
        )
        model.ir_version = IR_VERSION
        return model


def _shape_info(attr: Any) -> list[tuple[np.dtype | None, Shape | None]]:
    if attr.type == TENSORS:
        return [_tensor_info(t) for t in attr.tensors]
    if attr.type == TUPLE:
        infos = []
        for item in attr.values:
            infos.extend(_shape_info(item) or [(None, None)])
        return infos
    return []


def _tensor_info(tensor: Any) -> tuple[np.dtype | None, Shape | None]:
    try:
        dtype = numpy_dtype(tensor.data_type, "").newbyteorder("=")
    except MindIRFormatError:
        dtype = None
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < -2 for d in dims) or -2 in dims:  # -2: unknown rank
        return dtype, None
    try:
        checked_dims([d for d in dims if d >= 0], "")
    except MindIRFormatError:
        return dtype, None
    return dtype, tuple(d if d >= 0 else None for d in dims)


def _flatten(value: Value) -> list[Value]:
    if isinstance(value, TupleValue):
        return [leaf for item in value.items for leaf in _flatten(item)]
    return [value]


def _is_numeric(value: Any) -> bool:
    if isinstance(value, (bool, int, float, np.number, np.ndarray)):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, (int, float)) for v in value)


def _onnx_attribute(value: Any) -> Any:
    """A primitive attribute as an ONNX attribute value for a custom node, or None to drop it."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return value
    if isinstance(value, DType):
        return str(value.dtype)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (int, np.integer)) for v in value):
        return [int(v) for v in value]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return None
