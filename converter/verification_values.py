"""What the graph says about a verification input's values, read from the nodes that use it.

Random values in a planned shape (:mod:`converter.verification_inputs`) are still rejected by
many real models: token ids past the end of an embedding table, a zero divisor or OneHot depth, a
sample rate the graph checks against 16000. So each input gets a :class:`ValueHint`, read from
its uses, looking through ops that only move values (Cast, Unsqueeze, Reshape, Slice...):

- integers that reach a Gather's indices (or an ONNX Runtime embedding's) lie in ``[0, rows)``
  of the table they index;
- divisors, OneHot depths, Resize scales or sizes and shape operands are positive (OneHot's float
  indices and depths whole numbers);
- an input named as a mask is ones, one named as a length holds the sequence's size;
- a value the graph only compares (``Equal``) with a scalar constant is that constant.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from lite.sample_inputs import INDEX_CARRYING_OPS

# Ops whose output carries the same indices as their first input (values, possibly reshaped or
# some of them picked: Slice, Gather's data, as torch.export writes a scalar's ``sr[0]``); the
# runtime plans its benchmark inputs through the same ones.
_PASS_THROUGH = INDEX_CARRYING_OPS


@dataclass
class ValueHint:
    """What the graph says about one input's values."""

    low: int = 0
    high: int | None = None  # exclusive; None: no bound from the graph
    positive: bool = False
    ones: bool = False
    length_of: str | None = None  # a symbolic dimension whose size this input holds
    equals: float | None = None  # the constant the graph compares it with (Equal)
    whole: bool = False  # float-typed but read as an integer (OneHot's indices and depth)


def value_hints(proto: onnx.ModelProto, names: list[str]) -> dict[str, ValueHint]:
    """A hint for each of the inputs ``names``, from their names and the nodes that read them."""
    graph = proto.graph
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for slot, value in enumerate(node.input):
            readers.setdefault(value, []).append((node, slot))
    dims = _known_dims(proto)
    constants = _scalar_constants(proto)
    hints = {}
    for name in names:
        hint = ValueHint()
        lowered = name.lower()
        if "mask" in lowered:
            hint.ones = True
        uses = list(_uses(name, readers))
        for node, slot in uses:
            _apply_use(hint, node, slot, dims)
        hint.equals = _compared_constant(uses, constants)
        if re.search(r"(^|_)(len|lens|length|lengths)$", lowered):
            hint.length_of = _first_symbolic(graph, exclude=name)
        hints[name] = hint
    return hints


def _uses(name: str, readers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> Iterator[tuple[onnx.NodeProto, int]]:
    """The nodes that read ``name``'s values, looking through ops that only move them."""
    pending, visited = [name], {name}
    while pending:
        value = pending.pop()
        for node, slot in readers.get(value, []):
            yield node, slot
            if node.op_type in _PASS_THROUGH and slot == 0 and node.domain in ("", "ai.onnx"):
                for output in node.output:
                    if output and output not in visited and len(visited) < 64:
                        visited.add(output)
                        pending.append(output)


# Ops of ONNX Runtime that look rows up in their own tables: input slot -> the slot of the table
# whose rows (axis 0) it indexes. EmbedLayerNormalization (its contrib op spec,
# https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md): input_ids index
# word_embedding, segment_ids segment_embedding (BERT's token types: 2 rows), position_ids
# position_embedding.
_EMBEDDING_TABLES: dict[tuple[str, str], dict[int, int]] = {
    ("com.microsoft", "EmbedLayerNormalization"): {0: 2, 1: 4, 8: 3},
}


def _indexed_table(node: onnx.NodeProto, slot: int) -> tuple[str, int] | None:
    """(table, axis) when input ``slot`` of ``node`` holds indices into a table."""
    if node.op_type in ("Gather", "GatherElements") and slot == 1:
        return node.input[0], next((a.i for a in node.attribute if a.name == "axis"), 0)
    table_slot = _EMBEDDING_TABLES.get((node.domain, node.op_type), {}).get(slot)
    if table_slot is not None and table_slot < len(node.input) and node.input[table_slot]:
        return node.input[table_slot], 0
    return None


def _apply_use(hint: ValueHint, node: onnx.NodeProto, slot: int, dims: dict[str, list[int | None]]) -> None:
    op = node.op_type
    table = _indexed_table(node, slot)
    if table is not None:
        name, axis = table
        shape = dims.get(name)
        if shape and -len(shape) <= axis < len(shape) and shape[axis]:
            rows = shape[axis]
            hint.high = rows if hint.high is None else min(hint.high, rows)
        elif hint.high is None:
            hint.high = 2  # an unknown table: its smallest plausible size
    elif op == "OneHot" and slot in (0, 1):
        # Float indices and depth are truncated to integers, and runtimes have disagreed on
        # fractions (ONNX Runtime 1.30 against 1.32): whole numbers leave nothing to round.
        hint.whole = True
        hint.positive = hint.positive or slot == 1
    elif op in ("Mod", "Div") and slot == 1:
        hint.positive = True
    elif op == "Resize" and slot in (2, 3):
        hint.positive = True
    elif op in ("Range", "ConstantOfShape", "Tile") or (op in ("Reshape", "Expand") and slot == 1):
        hint.positive = True


def _compared_constant(uses: list[tuple[onnx.NodeProto, int]], constants: dict[str, float]) -> float | None:
    """The constant a value is compared with, when every use of it is an ``Equal`` with the same
    scalar constant (sample rates, modes); None otherwise."""
    seen = set()
    for node, slot in uses:
        if node.op_type in _PASS_THROUGH and slot == 0:
            continue  # the values reach the uses after it unchanged
        if node.op_type != "Equal" or len(node.input) != 2 or node.input[1 - slot] not in constants:
            return None
        seen.add(constants[node.input[1 - slot]])
    return seen.pop() if len(seen) == 1 else None


def _scalar_constants(proto: onnx.ModelProto) -> dict[str, float]:
    """Initializers and Constant outputs of one element, by name."""
    tensors = {init.name: init for init in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR:
                    tensors[node.output[0]] = attribute.t
    scalars = {}
    for name, tensor in tensors.items():
        if int(np.prod(tensor.dims)) == 1 and tensor.data_type != onnx.TensorProto.STRING:
            try:
                scalars[name] = onnx.numpy_helper.to_array(tensor).reshape(-1)[0].item()
            except (ValueError, TypeError):  # external or malformed data: no hint
                continue
    return scalars


def _known_dims(proto: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Static shapes of initializers, Constant outputs and declared values."""
    dims: dict[str, list[int | None]] = {init.name: list(init.dims) for init in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR:
                    dims[node.output[0]] = list(attribute.t.dims)
    for value in (*proto.graph.value_info, *proto.graph.input):
        if value.name not in dims and value.type.HasField("tensor_type"):
            dims[value.name] = [d.dim_value if d.HasField("dim_value") else None
                                for d in value.type.tensor_type.shape.dim]
    return dims


def _first_symbolic(graph: onnx.GraphProto, exclude: str) -> str | None:
    for value in graph.input:
        if value.name == exclude or not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if axis > 0 and dim.HasField("dim_param") and dim.dim_param:
                return dim.dim_param
    return None
