"""Types of the outputs of ONNX Runtime's contrib ops, which ONNX's shape inference does not know.

ONNX Runtime's transformer optimizer and its saved optimized graphs write ops of its own
(``com.microsoft`` Attention, SkipLayerNormalization, FastGelu, ...; ``com.microsoft.nchwc``
Conv and ReorderOutput; SimplifiedLayerNormalization registered in the ONNX domain). ONNX's
inference has no schema for them, so their outputs, and every value computed from those, are left
without an element type, and the int8 quantizers then decline every MatMul after the first fused
op ("input A is not a float32 activation").

:func:`infer_contrib_types` fills those gaps after ONNX's inference: walking each graph in
order, a contrib node gets its outputs' types from :data:`CONTRIB_OUTPUTS` (from the type
constraints of https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md), and
a standard node whose inputs became typed is inferred again on its own by ONNX
(``onnx.shape_inference.infer_node_outputs``). One walk types a whole chain of fused layers,
where re-running ONNX's inference of the whole model would need one run per fused op in the
chain. ONNX Runtime's own symbolic shape inference does this too, but needs onnxruntime (the
converter does not) and failed on the nchwc graphs of its ALL optimization level.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
import onnx_ir as ir

from converter.passes.base import all_graphs

_FLOAT = ir.DataType.FLOAT


@dataclass(frozen=True)
class ContribOutputs:
    """Where each output's element type comes from: an input slot (its type is copied) or a fixed
    type; ``same_shape``: the outputs whose shape is input 0's."""

    types: tuple[int | ir.DataType, ...]
    same_shape: tuple[int, ...] = ()


_LIKE_INPUT = ContribOutputs((0,))  # output 0 has input 0's type (shape unknown here)
_ELEMENTWISE = ContribOutputs((0,), same_shape=(0,))
# output, mean, inv_std_var (float: ONNX Runtime's U), input_skip_bias_sum
_SKIP_NORMALIZATION = ContribOutputs((0, _FLOAT, _FLOAT, 0), same_shape=(0, 3))
_NCHWC = ("Conv", "ReorderInput", "ReorderOutput", "MaxPool", "AveragePool", "GlobalMaxPool",
          "GlobalAveragePool", "Upsample")

CONTRIB_OUTPUTS: dict[tuple[str, str], ContribOutputs] = {
    ("com.microsoft", "Attention"): ContribOutputs((0, 0)),  # output, present
    ("com.microsoft", "MultiHeadAttention"): ContribOutputs((0, 0, 0)),  # output, present_key, present_value
    ("com.microsoft", "GroupQueryAttention"): ContribOutputs((0, 0, 0)),
    ("com.microsoft", "RotaryEmbedding"): _ELEMENTWISE,
    # output (word_embedding's type), mask_index (int32), embedding_sum
    ("com.microsoft", "EmbedLayerNormalization"): ContribOutputs((2, ir.DataType.INT32, 2)),
    ("com.microsoft", "SkipLayerNormalization"): _SKIP_NORMALIZATION,
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): _SKIP_NORMALIZATION,
    ("", "SkipSimplifiedLayerNormalization"): _SKIP_NORMALIZATION,
    ("", "SimplifiedLayerNormalization"): ContribOutputs((0, _FLOAT), same_shape=(0,)),
    ("com.microsoft", "FastGelu"): _ELEMENTWISE,
    ("com.microsoft", "BiasGelu"): _ELEMENTWISE,
    ("com.microsoft", "Gelu"): _ELEMENTWISE,
    ("com.microsoft", "QuickGelu"): _ELEMENTWISE,
    ("com.microsoft", "BiasAdd"): _ELEMENTWISE,
    ("com.microsoft", "BiasSplitGelu"): _LIKE_INPUT,
    ("com.microsoft", "FusedMatMul"): _LIKE_INPUT,
    ("com.microsoft", "FusedGemm"): _LIKE_INPUT,
    ("com.microsoft", "FusedConv"): _LIKE_INPUT,
    ("com.microsoft", "MatMulNBits"): _LIKE_INPUT,
    ("com.microsoft", "DynamicQuantizeMatMul"): _LIKE_INPUT,
    ("com.microsoft", "MatMulIntegerToFloat"): ContribOutputs((2,)),  # a_scale's type
    ("com.microsoft", "DequantizeLinear"): ContribOutputs((1,)),  # x_scale's type
    **{("com.microsoft.nchwc", op_type): _LIKE_INPUT for op_type in _NCHWC},
}

_INPUT_DATA_MAX = 1024  # constant integer inputs up to this size are given to ONNX (Reshape's shape)


def infer_contrib_types(model: ir.Model) -> int:
    """Type the untyped outputs of contrib nodes and of the standard nodes that read them, in
    place; return how many values got a type. A standard node is inferred again only when it
    reads a value typed here: any other ONNX's inference has already seen as it is."""
    opsets = dict(model.opset_imports)
    typed: set[int] = set()  # ids of the values typed here
    for graph in all_graphs(model):
        for node in graph:
            untyped = [value for value in node.outputs if value.dtype is None]
            if not untyped:
                continue
            rule = CONTRIB_OUTPUTS.get((node.domain, node.op_type))
            if rule is not None:
                _apply_rule(node, rule)
            elif any(value is not None and id(value) in typed for value in node.inputs):
                _infer_standard(node, opsets)
            typed.update(id(value) for value in untyped if value.dtype is not None)
    return len(typed)


def _apply_rule(node: ir.Node, rule: ContribOutputs) -> None:
    for slot, (value, source) in enumerate(zip(node.outputs, rule.types)):
        if value.dtype is not None:
            continue
        if isinstance(source, ir.DataType):
            value.dtype = source
        elif source < len(node.inputs) and node.inputs[source] is not None and node.inputs[source].dtype is not None:
            value.dtype = node.inputs[source].dtype
        else:
            continue
        first = node.inputs[0] if node.inputs else None
        if slot in rule.same_shape and value.shape is None and first is not None and first.shape is not None:
            value.shape = first.shape


def _infer_standard(node: ir.Node, opsets: dict[str, int]) -> None:
    """ONNX's inference of one standard-domain node whose inputs are all typed."""
    if node.domain not in ("", "ai.onnx") or any(a.type == ir.AttributeType.GRAPH for a in node.attributes.values()):
        return
    inputs = [value for value in node.inputs if value is not None]
    if any(value.dtype is None or not value.name for value in inputs):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get("", opsets.get("ai.onnx", 1)), "")
        outputs = onnx.shape_inference.infer_node_outputs(
            schema, ir.serde.serialize_node(node),
            {value.name: ir.serde.serialize_value(value).type for value in inputs},
            _input_data(inputs),
        )
    except (onnx.defs.SchemaError, onnx.shape_inference.InferenceError):
        return  # a node ONNX cannot infer on its own stays untyped, as ONNX's inference left it
    for value in node.outputs:
        inferred = outputs.get(value.name)
        if value.dtype is not None or inferred is None or not inferred.HasField("tensor_type"):
            continue
        if inferred.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            continue
        value.dtype = ir.DataType(inferred.tensor_type.elem_type)
        if value.shape is None and inferred.tensor_type.HasField("shape"):
            value.shape = ir.serde.deserialize_type_proto_for_shape(inferred)


def _input_data(inputs: list[ir.Value]) -> dict[str, onnx.TensorProto]:
    """Small constant integer inputs (shapes, axes), which ONNX reads to infer output shapes."""
    data = {}
    for value in inputs:
        tensor = value.const_value
        if tensor is not None and tensor.dtype.is_integer() and tensor.size <= _INPUT_DATA_MAX:
            data[value.name] = ir.serde.serialize_tensor(tensor)
    return data
