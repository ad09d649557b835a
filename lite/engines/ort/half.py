"""Half-precision compute for GPUs: rewrite a lowered ONNX model so float32 math runs in float16.

A model converted with ``--fp16`` stores float16 weights, each read through ``Cast(to=FLOAT)``,
and computes in float32: exact on any device. On a GPU, tensor cores make float16 several times
faster, so the CUDA engine (``precision="auto"`` or ``"fp16"``) rewrites the lowered model:

- every float32 type inside the graph becomes float16: initializers, ``Constant`` values,
  tensor attributes, ``Cast(to=FLOAT)`` targets (so the weight casts become no-ops ONNX Runtime
  removes) and declared value types, in subgraphs too;
- the interface keeps its types: a float32 input is cast to float16 once, a float32 output is
  computed in float16 and cast back, so callers see the model they converted;
- inputs that ONNX requires to be float32 (Resize/Upsample scales) keep float32;
- constants float16 cannot hold are clamped, not flushed: a nonzero value under float16's
  smallest subnormal (a decomposed LayerNorm's epsilon of 1e-12) becomes that subnormal with its
  sign, not 0 (a zero variance plus a zero epsilon divides by zero: NaN); a finite value past
  65504 (an attention mask's -3.4e38) becomes ±65504, not an infinity (a fully masked row then
  sums to 0 instead of NaN), as ONNX Runtime's own float16 converter clamps its constants.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.format.dtypes import float32_to_float16_clamped
from lite.format.onnx.lower import Lowered

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16
# (op type, input index) that the ONNX schema types as float32 only.
_FLOAT32_ONLY_INPUTS = {("Resize", 2), ("Upsample", 1)}


def has_half_weights(lowered: Lowered) -> bool:
    """True when the model stores float16 weights (it was converted with ``--fp16``)."""
    if any(array.dtype == np.float16 for array in lowered.external.values()):
        return True
    return any(t.data_type == FLOAT16 for t in lowered.model.graph.initializer)


def to_half_compute(lowered: Lowered) -> Lowered:
    model = onnx.ModelProto()
    model.CopyFrom(lowered.model)
    graph = model.graph
    keep_float = _float32_only_sources(graph)
    external = {name: (float32_to_float16_clamped(array) if array.dtype == np.float32 and name not in keep_float else array)
                for name, array in lowered.external.items()}
    for initializer in graph.initializer:
        if initializer.name in keep_float:
            continue
        _half_tensor(initializer)
    _half_graph_body(graph, keep_float)
    _keep_interface(graph)
    return Lowered(model, external)


def _float32_only_sources(graph: onnx.GraphProto) -> set[str]:
    return {node.input[index] for node in graph.node for (op, index) in _FLOAT32_ONLY_INPUTS
            if node.op_type == op and len(node.input) > index and node.input[index]}


def _half_tensor(tensor: TensorProto) -> None:
    if tensor.data_type != FLOAT:
        return
    if tensor.data_location == TensorProto.EXTERNAL:
        tensor.data_type = FLOAT16
        for entry in tensor.external_data:
            if entry.key == "length":
                entry.value = str(int(entry.value) // 2)
        return
    half = numpy_helper.from_array(float32_to_float16_clamped(numpy_helper.to_array(tensor)), tensor.name)
    tensor.CopyFrom(half)


def _half_graph_body(graph: onnx.GraphProto, keep_float: set[str]) -> None:
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i == FLOAT:
                attribute.i = FLOAT16
            elif attribute.type == onnx.AttributeProto.TENSOR and not (node.output and node.output[0] in keep_float):
                _half_tensor(attribute.t)
            elif attribute.type == onnx.AttributeProto.GRAPH:
                _half_subgraph(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for body in attribute.graphs:
                    _half_subgraph(body)
    for info in graph.value_info:
        if info.name not in keep_float:
            _half_type(info.type)


def _half_subgraph(graph: onnx.GraphProto) -> None:
    for initializer in graph.initializer:
        _half_tensor(initializer)
    for info in (*graph.input, *graph.output):
        _half_type(info.type)
    _half_graph_body(graph, _float32_only_sources(graph))


def _half_type(type_proto: onnx.TypeProto) -> None:
    if type_proto.HasField("tensor_type") and type_proto.tensor_type.elem_type == FLOAT:
        type_proto.tensor_type.elem_type = FLOAT16


def _keep_interface(graph: onnx.GraphProto) -> None:
    """Float32 inputs/outputs stay float32 outside; inside, they are float16."""
    casts_in = []
    for value in graph.input:
        if value.type.tensor_type.elem_type != FLOAT:
            continue
        inner = f"{value.name}__fp16"
        for node in graph.node:
            node.input[:] = [inner if name == value.name else name for name in node.input]
        casts_in.append(helper.make_node("Cast", [value.name], [inner], name=f"{value.name}/to_fp16", to=FLOAT16))
    casts_out = []
    for value in graph.output:
        if value.type.tensor_type.elem_type != FLOAT:
            continue
        inner = f"{value.name}__fp16"
        for node in graph.node:
            node.output[:] = [inner if name == value.name else name for name in node.output]
            node.input[:] = [inner if name == value.name else name for name in node.input]
        casts_out.append(helper.make_node("Cast", [inner], [value.name], name=f"{value.name}/to_fp32", to=FLOAT))
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend([*casts_in, *nodes, *casts_out])
