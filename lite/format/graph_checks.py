"""Semantic checks of a graph read from a .lite file, beyond its flatbuffer structure.

Each check raises :class:`~lite.errors.ModelFormatError` naming the graph, node or tensor (the
reader adds the file's name): fused activations the engines know, implied QDQ nodes in a place
they can stand, one producer per tensor with nodes in execution order, and subgraph references
without cycles.
"""

from __future__ import annotations

from lite.errors import ModelFormatError
from lite.format import fused_activation, ir
from lite.format.qdq import ImpliedQdq


def check_fused_activation(attributes: dict[str, ir.Attribute], where: str) -> None:
    """A fused activation (:mod:`lite.format.fused_activation`) is a known name, as STRING, with
    FLOATS parameters of its count: the engines and the ONNX lowering index them unchecked."""
    kind = attributes.get(fused_activation.ATTRIBUTE)
    if kind is None:
        raise ModelFormatError(f"{where}: has {fused_activation.PARAMS_ATTRIBUTE} without {fused_activation.ATTRIBUTE}")
    if kind.type != ir.AttributeType.STRING:
        raise ModelFormatError(
            f"{where}: {fused_activation.ATTRIBUTE} is {kind.type.name}, expected a STRING naming the activation"
        )
    try:
        name = bytes(kind.value).decode()
    except UnicodeDecodeError:
        raise ModelFormatError(f"{where}: {fused_activation.ATTRIBUTE} is not UTF-8 text; the file is damaged") from None
    params_attribute = attributes.get(fused_activation.PARAMS_ATTRIBUTE)
    params: list[float] = []
    if params_attribute is not None:
        if params_attribute.type != ir.AttributeType.FLOATS:
            raise ModelFormatError(
                f"{where}: {fused_activation.PARAMS_ATTRIBUTE} is {params_attribute.type.name}, expected FLOATS"
            )
        params = [float(value) for value in params_attribute.value]
    reason = fused_activation.check(name, params)
    if reason is not None:
        raise ModelFormatError(f"{where}: {reason}; the file is damaged")



def check_implied(graph: ir.Graph, implied: dict[int, ImpliedQdq], where: str) -> None:
    """Implied nodes have a place: a quantized value is computed here (a graph input or a node
    output), and no graph output or capture stands for implied nodes."""
    produced = {index for node in graph.nodes for index in node.outputs}
    for index, kind in implied.items():
        label = f"{where} tensor {index} ({graph.tensors[index].name!r}): {kind.name}"
        if index in graph.outputs or index in graph.captures:
            raise ModelFormatError(f"{label} on a graph {'output' if index in graph.outputs else 'capture'}; "
                            "store its QDQ nodes explicitly")
        if kind == ImpliedQdq.QUANTIZE_DEQUANTIZE and index not in produced and index not in graph.inputs:
            raise ModelFormatError(f"{label} on a value that is neither a graph input nor a node output")

def check_dataflow(graph: ir.Graph, where: str) -> None:
    """Every tensor has at most one producer, and nodes only read values already available."""
    available = set(graph.inputs) | set(graph.captures)
    available.update(i for i, t in enumerate(graph.tensors) if t.is_constant)
    produced: dict[int, int] = {}
    for index in graph.inputs:
        if graph.tensors[index].is_constant:
            raise ModelFormatError(f"{where}: graph input {graph.tensors[index].name!r} is also a constant")
    for position, node in enumerate(graph.nodes):
        for tensor_index in node.inputs:
            if tensor_index >= 0 and tensor_index not in available:
                raise ModelFormatError(
                    f"{where}: node {position} ({node.name or node.op_type!r}) reads "
                    f"{graph.tensors[tensor_index].name!r} before anything produces it "
                    "(nodes must be stored in execution order, and the graph must be acyclic)"
                )
        for tensor_index in node.outputs:
            if tensor_index < 0:
                continue
            if tensor_index in produced or tensor_index in available:
                raise ModelFormatError(
                    f"{where}: tensor {graph.tensors[tensor_index].name!r} is produced by node {position} "
                    f"({node.name or node.op_type!r}) but is already a graph input, a constant "
                    f"or the output of node {produced.get(tensor_index, '-')}"
                )
            produced[tensor_index] = position
            available.add(tensor_index)
    for index in graph.outputs:
        if index not in available:
            raise ModelFormatError(f"{where}: graph output {graph.tensors[index].name!r} is never produced")

def check_graph_references(graphs: list[ir.Graph]) -> None:
    """Subgraph references form no cycle (a body may not contain itself)."""
    edges = []
    for graph in graphs:
        targets = set()
        for node in graph.nodes:
            for attribute in node.attributes.values():
                if attribute.type == ir.AttributeType.GRAPH:
                    targets.add(attribute.value)
                elif attribute.type == ir.AttributeType.GRAPHS:
                    targets.update(attribute.value)
        edges.append(targets)
    state = [0] * len(graphs)  # 0 unvisited, 1 on the stack, 2 done
    for start in range(len(graphs)):
        if state[start]:
            continue
        stack = [(start, iter(edges[start]))]
        state[start] = 1
        while stack:
            current, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[current] = 2
                stack.pop()
            elif state[child] == 1:
                raise ModelFormatError(f"graph {child} ({graphs[child].name!r}) contains itself through subgraph attributes")
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(edges[child])))
