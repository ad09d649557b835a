"""Passes that remove what inference does not need.

remove_identity
    ``Identity`` (https://onnx.ai/onnx/operators/onnx__Identity.html), inference-mode
    ``Dropout`` (https://onnx.ai/onnx/operators/onnx__Dropout.html: the output equals the input
    when ``training_mode`` is absent or false, and opset < 12 exports are inference graphs) and
    nodes that return their input unchanged (a Pad by constant zeros, as Swin's window padding
    folds to on sizes that need none; a Transpose by the identity permutation; a Cast to the
    input's own type; a Reshape, Expand or Tile whose static output shape is the input's; a Concat
    of one input) are bypassed: their readers read the input directly. It runs before and after
    ``fold_constants``, which makes such Pads' amounts constant. When the output is a graph output, the input
    takes its name. Declines when the mask output of Dropout is read, when ``training_mode`` is not a
    constant false, or when bypassing would join a graph input to a graph output (the graph
    interface needs a node there).

remove_unused
    Nodes whose outputs nobody reads (and that are not graph outputs) are removed, repeatedly,
    bottom up; then initializers nobody reads. Graph inputs are part of the interface and stay.
"""

from __future__ import annotations

import time

import numpy as np
import onnx_ir as ir

from converter.passes.base import (
    PassContext,
    PassResult,
    RewriteRule,
    RulePass,
    all_graphs,
    constant,
    describe,
    replace_output,
)


class BypassIdentity(RewriteRule):
    name = "remove_identity"

    def match(self, node: ir.Node) -> ir.Node | None:
        if node.domain == "" and (node.op_type in ("Identity", "Dropout") or _unchanged(node)):
            return node
        return None

    def check(self, node: ir.Node) -> str | None:
        source, output = node.inputs[0], node.outputs[0]
        if source is None:
            return "input is missing"
        if node.op_type == "Dropout":
            if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
                return "the mask output is read"
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                mode = constant(node.inputs[2])
                if mode is None:
                    return "training_mode is not a constant"
                if bool(np.asarray(mode).reshape(-1)[0]):
                    return "training_mode is true"
        if output.is_graph_output():
            if source.is_graph_input() or source.is_graph_output():
                return f"it joins {source.name!r} to graph output {output.name!r}; the interface needs a node"
            if source.graph is not node.graph:
                return f"graph output {output.name!r} would be a value of an enclosing graph"
            if source.is_initializer():
                return f"graph output {output.name!r} would be initializer {source.name!r}"
        return None

    def rewrite(self, node: ir.Node) -> str:
        source, output = node.inputs[0], node.outputs[0]
        graph = node.graph
        replace_output(output, source)
        for extra in node.outputs[1:]:
            extra.name = None
        graph.remove(node, safe=True)
        return f"bypassed {describe(node)}"


def _unchanged(node: ir.Node) -> bool:
    """Whether ``node``'s only output is its first input, whatever values it holds."""
    if not node.inputs or node.inputs[0] is None or len(node.outputs) != 1:
        return False
    source, output = node.inputs[0], node.outputs[0]
    op = node.op_type
    if op == "Pad":
        pads = constant(node.inputs[1]) if len(node.inputs) > 1 else None
        if pads is None and len(node.inputs) == 1:  # opsets 1-10: the amounts are an attribute
            attribute = node.attributes.get("pads") or node.attributes.get("paddings")
            pads = None if attribute is None else np.asarray(attribute.value)
        return pads is not None and pads.size > 0 and not pads.any()
    if op == "Transpose":
        perm = node.attributes.get("perm")
        return perm is not None and list(perm.value) == list(range(len(perm.value)))
    if op == "Cast":
        to = node.attributes.get("to")
        return to is not None and source.dtype is not None and int(to.value) == int(source.dtype)
    if op == "Concat":
        return len(node.inputs) == 1
    if op in ("Reshape", "Expand", "Tile"):
        return _static(source.shape) and _static(output.shape) and tuple(source.shape) == tuple(output.shape)
    return False


def _static(shape: ir.Shape | None) -> bool:
    return shape is not None and all(isinstance(dim, int) for dim in shape)


remove_identity = RulePass("remove_identity", [BypassIdentity()], __doc__ or "")


def remove_unused(model: ir.Model, context: PassContext) -> PassResult:
    result = PassResult("remove_unused")
    started = time.perf_counter()
    for graph in all_graphs(model):
        outputs = set(graph.outputs)
        for node in reversed(list(graph)):
            if any(v.uses() or v in outputs for v in node.outputs):
                continue
            if _has_side_effects(node):
                continue
            graph.remove(node, safe=True)
            result.changed += 1
            result.counts["nodes"] += 1
            result.details.append(f"removed dead {describe(node)}")
        inputs = set(graph.inputs)
        for name, value in list(graph.initializers.items()):
            if value.uses() or value in outputs or value in inputs:
                continue
            graph.initializers.pop(name)
            result.changed += 1
            result.counts["initializers"] += 1
            result.details.append(f"removed unused initializer {name!r}")
    result.seconds = time.perf_counter() - started
    return result


def _has_side_effects(node: ir.Node) -> bool:
    # No default-domain ONNX op has side effects at inference; custom ops might.
    return node.domain not in ("", "ai.onnx")
