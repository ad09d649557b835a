"""Semantic checks of a graph read from a .lite file, beyond its flatbuffer structure.

Each check raises :class:`~lite.errors.ModelFormatError` naming the graph, node or tensor (the
reader adds the file's name): fused activations the engines know, implied QDQ nodes in a place
they can stand, one producer per tensor with nodes in execution order, and subgraph references
without cycles, nested at most 30 deep, whose sharing does not multiply the model's size.
"""

from __future__ import annotations

from lite.errors import ModelFormatError
from lite.format import fused_activation, ir
from lite.format.qdq import ImpliedQdq

# Bodies within bodies. Exporters nest a few levels (an If in a Loop in an If). ONNX's protobuf
# parsers stop at 100 message levels, three per body (node, attribute, graph): ONNX Runtime loads
# 31 levels and refuses 32, so no ONNX model nests deeper, and 30 leaves room for the value types
# inside the deepest body. Every engine's recursive walk of the bodies (a few Python frames per
# level) stays far from Python's recursion limit.
MAX_SUBGRAPH_NESTING = 30
# Graphs and nodes that copying shared bodies may add (the converter never shares one). ONNX
# Runtime sets up each copied body as a subgraph of its own (about 0.5 ms apiece); the slowest file
# found under the limit (30 bodies deep, the last 11 shared) loads in about 6 s.
MAX_COPIED_ELEMENTS = 10_000


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
    """Subgraph references form no cycle (a body may not contain itself), nest at most
    :data:`MAX_SUBGRAPH_NESTING` deep, and shared bodies copy at most :data:`MAX_COPIED_ELEMENTS`.

    Every engine walks bodies recursively (the numpy engine runs them, the ONNX lowering copies
    them into protobuf), so a chain of thousands of bodies was a ``RecursionError``. A graph index
    may be named by several attributes (then and else branch, several nodes): the numpy engine
    shares the body, but ONNX has no shared bodies, so lowering copies it once per reference and a
    chain of 16 bodies naming the next twice became 2**16 copies (3 KB file, minutes and gigabytes
    in ONNX Runtime, which also sets up every copy as a subgraph of its own).
    """
    references = [_subgraph_references(graph) for graph in graphs]
    order = _children_first(graphs, references)
    _check_nesting(graphs, references, order)
    _check_expansion(graphs, references, order)


def _subgraph_references(graph: ir.Graph) -> list[int]:
    """The graph indices ``graph``'s attributes name, once per mention."""
    targets = []
    for node in graph.nodes:
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                targets.append(attribute.value)
            elif attribute.type == ir.AttributeType.GRAPHS:
                targets.extend(attribute.value)
    return targets


def _children_first(graphs: list[ir.Graph], references: list[list[int]]) -> list[int]:
    """Every graph index, each after the graphs it references (iterative: chains may be long);
    a cycle is a :class:`ModelFormatError`."""
    state = [0] * len(graphs)  # 0 unvisited, 1 on the stack, 2 done
    order = []
    for start in range(len(graphs)):
        if state[start]:
            continue
        stack = [(start, iter(references[start]))]
        state[start] = 1
        while stack:
            current, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[current] = 2
                order.append(current)
                stack.pop()
            elif state[child] == 1:
                raise ModelFormatError(f"graph {child} ({graphs[child].name!r}) contains itself through subgraph attributes")
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(references[child])))
    return order


def _check_nesting(graphs: list[ir.Graph], references: list[list[int]], order: list[int]) -> None:
    """No chain of bodies within bodies is deeper than :data:`MAX_SUBGRAPH_NESTING`."""
    depth = [0] * len(graphs)  # bodies nested in each graph, along its deepest chain
    for index in order:
        depth[index] = max((depth[child] + 1 for child in references[index]), default=0)
    deepest = max(range(len(graphs)), key=depth.__getitem__)
    if depth[deepest] <= MAX_SUBGRAPH_NESTING:
        return
    chain = [deepest]
    while references[chain[-1]] and len(chain) < 4:
        chain.append(max(references[chain[-1]], key=depth.__getitem__))
    names = " -> ".join(f"{index} ({graphs[index].name!r})" for index in chain)
    raise ModelFormatError(
        f"graph {names} -> ... nests subgraph bodies {depth[deepest]} deep, more than the limit of "
        f"{MAX_SUBGRAPH_NESTING}; the file is damaged or hostile"
    )


def _check_expansion(graphs: list[ir.Graph], references: list[list[int]], order: list[int]) -> None:
    """Copying each body once per reference from the main graph (what lowering to ONNX does) adds
    at most :data:`MAX_COPIED_ELEMENTS` graphs and nodes to those the file stores.

    Counted, not expanded: the size of each graph with its bodies copied in is computed once,
    children first, so the check is linear in the file however large the expansion.
    """
    expanded = [0] * len(graphs)
    for index in order:
        expanded[index] = 1 + len(graphs[index].nodes) + sum(expanded[child] for child in references[index])
    copies = [0] * len(graphs)  # how often each graph appears in the main graph's expansion
    copies[0] = 1
    for index in reversed(order):  # parents first
        for child in references[index]:
            copies[child] += copies[index]
    stored = sum(1 + len(graph.nodes) for graph, count in zip(graphs, copies) if count)
    added = expanded[0] - stored
    if added <= MAX_COPIED_ELEMENTS:
        return
    most = max(range(len(graphs)), key=copies.__getitem__)
    raise ModelFormatError(
        f"subgraph bodies named by several attributes expand the main graph to {expanded[0]:,} graphs and "
        f"nodes, {added:,} more than the file stores, once each reference gets its own copy (as ONNX "
        f"Runtime needs); the limit is {MAX_COPIED_ELEMENTS:,} (graph {most} ({graphs[most].name!r}) "
        f"would be copied {copies[most]:,} times); the file is damaged or hostile"
    )
