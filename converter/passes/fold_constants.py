"""fold_constants: compute nodes whose inputs are all known at conversion time.

Two kinds of node fold:

- a node whose every (present) input is a constant initializer: it is evaluated once with ONNX's
  reference implementation (``onnx.reference``, the spec's own executable form, chosen over the
  runtime's kernels so the converter does not depend on which kernels exist yet) and its outputs
  become initializers;
- shape arithmetic on static dimensions, even when the tensor itself is not constant: ``Shape``
  (with ``start``/``end``) and ``Size`` of a value whose dims are all known,
  ``Gather(Shape(x), indices)`` when the gathered dims are known, and ``CastLike(c, x)`` of a
  constant ``c`` when the element type of ``x`` is known. Folding these makes the chains
  that exporters build from shapes (e.g. the dynamo exporter's Conv bias
  ``Shape → Expand → Expand``) constant, so the next node in the chain folds too. Nodes are
  visited in graph (topological) order, so a whole chain folds in one pass.

Declines: non-deterministic ops (Random*, Bernoulli, Multinomial), ops with subgraphs, custom
domains, DequantizeLinear of an integer constant (a quantized model's weights stay quantized), outputs that are not tensors, and results that would add a large new weight (more than
``PassContext.max_folded_bytes`` and ``max_folded_growth`` times the inputs) — folding
``ConstantOfShape`` of a big shape would only bloat the file. Before evaluating a node, the size
of its outputs is computed from its inputs (:mod:`converter.passes.output_size`): a node whose
outputs would exceed ``PassContext.max_folded_elements``, or whose size cannot be known, is not
evaluated at all (a model is untrusted input: ``Range(0, 1e10)`` would allocate 80 GB). Declined
nodes stay in the graph, and the report says why.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import onnx
import onnx_ir as ir
from onnx.reference import ReferenceEvaluator

from converter.errors import PassError
from converter.passes.base import (
    PassContext,
    PassResult,
    add_initializer,
    all_graphs,
    constant,
    describe,
    opset_version,
    replace_output,
)
from converter.passes.output_size import predicted_elements

_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
# Ops never worth folding: they describe I/O or control flow rather than values.
_NEVER = _NONDETERMINISTIC | {"If", "Loop", "Scan", "SequenceMap", "Constant"}


def fold_constants(model: ir.Model, context: PassContext) -> PassResult:
    result = PassResult("fold_constants")
    started = time.perf_counter()
    for graph in all_graphs(model):
        opset = opset_version(model)
        for node in list(graph):
            if node.graph is not graph:
                continue
            outputs = _fold_static_shape(node)
            if outputs is None:
                outputs, reason = _evaluate(node, opset, context)
                if reason is not None:
                    result.declined.append(f"{describe(node)}: {reason}")
                    continue
                if outputs is None:
                    continue
            _replace_with_constants(graph, node, outputs, context)
            result.changed += 1
            result.counts[node.op_type] += 1
            result.details.append(f"folded {describe(node)} → {[tuple(a.shape) for a in outputs]}")
    result.seconds = time.perf_counter() - started
    return result


def _static_dims(value: ir.Value | None) -> list[int | None] | None:
    if value is None or value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


def _fold_static_shape(node: ir.Node) -> list[np.ndarray] | None:
    """Shape/Size/Gather(Shape) whose answer is known from static dims, else None."""
    if node.domain != "":
        return None
    if node.op_type in ("Shape", "Size"):
        dims = _static_dims(node.inputs[0])
        if dims is None:
            return None
        if node.op_type == "Shape":
            start = node.attributes.get("start")
            end = node.attributes.get("end")
            rank = len(dims)
            lo = start.value if start is not None else 0
            hi = end.value if end is not None else rank
            lo = min(max(lo + rank if lo < 0 else lo, 0), rank)
            hi = min(max(hi + rank if hi < 0 else hi, 0), rank)
            dims = dims[lo:hi]
            if any(d is None for d in dims):
                return None
            return [np.array(dims, dtype=np.int64)]
        if any(d is None for d in dims):
            return None
        return [np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)]
    if node.op_type == "CastLike" and len(node.inputs) == 2:
        # Only the *type* of the second input matters.
        source, like = constant(node.inputs[0]), node.inputs[1]
        if source is None or like is None or like.dtype is None:
            return None
        target = like.dtype
        if target.is_floating_point() or target.is_integer() or target == ir.DataType.BOOL:
            try:
                return [source.astype(target.numpy())]
            except (TypeError, ValueError):
                return None
        return None
    if node.op_type == "Gather" and len(node.inputs) == 2:
        shape_node = node.inputs[0].producer() if node.inputs[0] is not None else None
        indices = constant(node.inputs[1])
        if shape_node is None or shape_node.op_type != "Shape" or indices is None:
            return None
        if shape_node.attributes.get("start") is not None or shape_node.attributes.get("end") is not None:
            return None
        dims = _static_dims(shape_node.inputs[0])
        if dims is None:
            return None
        picked = np.asarray(np.take(np.array([-1 if d is None else d for d in dims], dtype=np.int64), indices.astype(np.int64)))
        if np.any(picked < 0):
            return None
        return [picked]
    return None


def _evaluate(
    node: ir.Node, opset: int, context: PassContext
) -> tuple[list[np.ndarray] | None, str | None]:
    """(outputs, None) when folded; (None, reason) when declined; (None, None) if not a candidate."""
    if node.domain != "" or node.op_type in _NEVER:
        return None, None
    present = [value for value in node.inputs if value is not None]
    if not present:
        return None, None  # e.g. ConstantOfShape with no input is not a thing; nothing to fold
    arrays = [constant(value) for value in present]
    if any(a is None for a in arrays):
        return None, None
    if any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()):
        return None, "has a subgraph"
    if node.op_type == "DequantizeLinear" and arrays[0].dtype.kind in "iu":
        # A quantized model's weight (or int32 bias): as float it would take 4x the file, and ONNX
        # Runtime, no longer seeing the Q/DQ pair, would run the layer in float instead of int8
        # (a shipped QDQ model grew 8.7 -> 16.6 MB and moved 2.2e-3 away from its own outputs).
        return None, "a quantized weight stays quantized (the engines dequantize it at load, or run it in int8)"
    proto, feeds = _reference_node(node)
    sizes, unknown = predicted_elements(proto, feeds, opset)
    if sizes is None:
        return None, unknown
    if sum(sizes) > context.max_folded_elements:
        return None, (
            f"its outputs would hold {sum(sizes):,} elements, more than constant folding evaluates "
            f"({context.max_folded_elements:,})"
        )
    try:
        outputs = _run_reference(proto, feeds, opset)
    except Exception as err:  # noqa: BLE001 (onnx.reference raises anything; the node just stays)
        return None, f"the reference implementation could not evaluate it ({type(err).__name__}: {err})"
    if any(not isinstance(out, np.ndarray) for out in outputs):
        return None, "an output is not a tensor"
    in_bytes = sum(a.nbytes for a in arrays)
    out_bytes = sum(o.nbytes for o in outputs)
    if out_bytes > context.max_folded_bytes and out_bytes > context.max_folded_growth * in_bytes:
        return None, f"the result ({out_bytes} bytes) would be a much larger weight than its inputs ({in_bytes} bytes)"
    return outputs, None


def _reference_node(node: ir.Node) -> tuple[onnx.NodeProto, dict[str, np.ndarray]]:
    """The node alone as a NodeProto reading inputs ``i0, i1, ...``, and their constant values."""
    names = [f"i{k}" if value is not None else "" for k, value in enumerate(node.inputs)]
    feeds = {names[k]: constant(value) for k, value in enumerate(node.inputs) if value is not None}
    proto = onnx.NodeProto()
    proto.op_type = node.op_type
    proto.input.extend(names)
    proto.output.extend(f"o{k}" for k in range(len(node.outputs)))
    for attr in node.attributes.values():
        proto.attribute.append(ir.serde.serialize_attribute(attr))
    return proto, feeds


def _run_reference(proto: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    evaluator = ReferenceEvaluator(proto, opsets={"": opset})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = evaluator.run(None, feeds)
    return [np.asarray(r) if isinstance(r, (np.ndarray, np.generic)) else r for r in results]


def _replace_with_constants(
    graph: ir.Graph, node: ir.Node, arrays: list[np.ndarray], context: PassContext
) -> None:
    for output, array in zip(node.outputs, arrays):
        if not output.uses() and not output.is_graph_output():
            continue
        expected = output.dtype
        folded = add_initializer(graph, array, context.unique_name(f"{output.name or node.op_type}_folded"))
        if expected is not None and folded.dtype != expected:
            raise PassError(
                f"fold_constants: {describe(node)} computes {folded.dtype} from its constant inputs, but the "
                f"model declares {output.name!r} as {expected}: the model's types are inconsistent "
                "(check the node's input types, or re-export the model)"
            )
        replace_output(output, folded)
        folded.const_value.name = folded.name  # it may have taken a graph output's name
    for output in node.outputs:
        output.name = None if not output.uses() else output.name
    graph.remove(node, safe=True)
