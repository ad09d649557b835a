"""Graph outputs declared with a type their node cannot produce, given that type by a Cast.

An operator whose schema fixes an output's element type (ai.onnx.ml's TreeEnsembleRegressor,
LinearRegressor, SVMRegressor and Scaler up to opset 3 give float) cannot make another one, yet
exporters declare what their users asked for:
skl2onnx converting a model with ``DoubleTensorType`` inputs at ai.onnx.ml opset 3 declares the
regressor's output double. ONNX Runtime refuses to load such a graph ("Type (tensor(double)) of
output arg ... does not match expected type (tensor(float))"), and lite's engines returned float32
under a float64 signature. Here each such output keeps its declared name and type: the node's
result is renamed and a Cast to the declared type makes the output, which the converted model's
users get as its signature says. Verification runs the same rewrite of the original (ONNX Runtime
then loads it).

Only the main graph's outputs are rewritten, and only where the schema allows exactly one element
type: an output whose type follows the node's inputs is what the rest of the import checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from lite.format.ir import fresh_name

_SUFFIX = "_computed"


@dataclass(frozen=True)
class DeclaredCast:
    """A graph output whose node computes ``computed`` while the graph declares ``declared``."""

    name: str
    op_type: str
    computed: int  # onnx.TensorProto element type
    declared: int

    def note(self) -> str:
        computed, declared = _type_name(self.computed), _type_name(self.declared)
        return (f"output {self.name!r} is declared {declared}, but its {self.op_type} node computes {computed} "
                f"(the operator's schema fixes it); a Cast to {declared} keeps the declared signature, with "
                f"{computed}'s precision")


def cast_to_declared_types(proto: onnx.ModelProto) -> list[DeclaredCast]:
    """Rewrite, in ``proto``, each main-graph output whose declared element type its node's schema
    rules out into a Cast of the node's result (see the module docstring); return them."""
    graph = proto.graph
    opsets = {entry.domain or "": entry.version for entry in proto.opset_import}
    producers = {output: (node, index) for node in graph.node for index, output in enumerate(node.output)}
    taken = {name for node in graph.node for name in [*node.input, *node.output]}
    taken |= {value.name for value in [*graph.input, *graph.initializer]}
    casts = []
    for output in graph.output:
        declared = _tensor_elem_type(output.type)
        found = producers.get(output.name)
        if declared not in _KNOWN or found is None:
            continue
        node, index = found
        computed = _fixed_output_type(node, index, opsets)
        if computed is None or computed == declared:
            continue
        computed_name = fresh_name(output.name + _SUFFIX, taken)
        _rename_everywhere(graph, output.name, computed_name, node, index, computed)
        graph.node.append(onnx.helper.make_node("Cast", [computed_name], [output.name], to=declared,
                                                name=fresh_name(f"{output.name}_cast_to_declared", taken)))
        casts.append(DeclaredCast(output.name, node.op_type, computed, declared))
    return casts


def _fixed_output_type(node: onnx.NodeProto, index: int, opsets: dict[str, int]) -> int | None:
    """The one element type ``node``'s schema allows for its output ``index``, else None."""
    domain = node.domain or ""
    if domain not in opsets:
        return None
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets[domain], domain)
    except (onnx.defs.SchemaError, TypeError):  # TypeError: a version past int32, which the import refuses
        return None
    if not schema.outputs:
        return None
    formal = schema.outputs[min(index, len(schema.outputs) - 1)]
    constraints = {constraint.type_param_str: constraint.allowed_type_strs for constraint in schema.type_constraints}
    allowed = constraints.get(formal.type_str, [formal.type_str])
    if len(allowed) != 1:
        return None
    return _TENSOR_TYPES.get(allowed[0])


def _rename_everywhere(graph: onnx.GraphProto, old: str, new: str, node: onnx.NodeProto, index: int,
                       computed: int) -> None:
    """Point ``node``'s output ``index`` and every reader of ``old`` in the main graph at ``new``; a
    ``value_info`` entry of ``old`` moves to ``new`` with the ``computed`` type (the declared one was
    the output's, which the Cast now makes)."""
    node.output[index] = new
    for reader in graph.node:
        for position, name in enumerate(reader.input):
            if name == old:
                reader.input[position] = new
    for value in graph.value_info:
        if value.name == old:
            value.name = new
            if value.type.WhichOneof("value") == "tensor_type":
                value.type.tensor_type.elem_type = computed


def _tensor_elem_type(value_type: onnx.TypeProto) -> int | None:
    if value_type.WhichOneof("value") != "tensor_type" or not value_type.tensor_type.elem_type:
        return None
    return value_type.tensor_type.elem_type


def _type_name(elem_type: int) -> str:
    return onnx.TensorProto.DataType.Name(elem_type).lower()


_TENSOR_TYPES = {f"tensor({name})": value for name, value in (
    ("float", onnx.TensorProto.FLOAT), ("double", onnx.TensorProto.DOUBLE), ("float16", onnx.TensorProto.FLOAT16),
    ("bfloat16", onnx.TensorProto.BFLOAT16), ("int64", onnx.TensorProto.INT64), ("int32", onnx.TensorProto.INT32),
    ("int16", onnx.TensorProto.INT16), ("int8", onnx.TensorProto.INT8), ("uint8", onnx.TensorProto.UINT8),
    ("uint16", onnx.TensorProto.UINT16), ("uint32", onnx.TensorProto.UINT32), ("uint64", onnx.TensorProto.UINT64),
    ("bool", onnx.TensorProto.BOOL), ("string", onnx.TensorProto.STRING),
)}
_KNOWN = frozenset(_TENSOR_TYPES.values())
