"""Cutting a graph into parts for an engine and the numpy engine (nodes it cannot run).

The ONNX Runtime and PyTorch engines both run the nodes they map and hand every other node to the
numpy engine: :func:`split` cuts the main graph into runs of consecutive nodes of one kind and
works out the tensors each part reads from earlier parts (its inputs) and those later parts or the
graph's outputs need (its outputs). A graph that is one part keeps the graph's own inputs and
outputs. :func:`numpy_part` builds the numpy engine of a part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lite.format import ir


@dataclass
class Part:
    on_engine: bool  # False: the numpy engine runs it
    nodes: list[ir.Node]
    inputs: list[int]  # tensor indices of the main graph
    outputs: list[int]


def split(model: ir.Model, on_engine: Callable[[ir.Node], bool]) -> list[Part]:
    """The main graph in parts of consecutive nodes that ``on_engine`` puts on the same side.

    A part's inputs are the non-constant tensors it reads and does not produce; its outputs are
    the tensors it produces that a later part or the graph's outputs need (graph outputs first).
    An empty graph, or one that is a single part, is one part with the graph's inputs and outputs.
    """
    graph = model.main
    parts: list[Part] = []
    for node in graph.nodes:
        side = on_engine(node)
        if parts and parts[-1].on_engine == side:
            parts[-1].nodes.append(node)
        else:
            parts.append(Part(side, [node], [], []))
    if len(parts) <= 1:
        return [Part(parts[0].on_engine if parts else True, list(graph.nodes), list(graph.inputs),
                     list(graph.outputs))]
    needed_later = set(graph.outputs)
    for part in reversed(parts):  # each part's reads are computed once, the later ones accumulated
        part_reads = ir.reads(model, graph, part.nodes)
        produced = {i for n in part.nodes for i in n.outputs if i >= 0}
        part.inputs = sorted(i for i in part_reads - produced if not graph.tensors[i].is_constant)
        part.outputs = sorted(produced & needed_later, key=lambda i: (i not in graph.outputs, i))
        needed_later |= part_reads
    return parts


def numpy_part(model: ir.Model, part: Part, index: int, custom_ops=None):
    """The numpy engine for ``part`` (its nodes as the main graph; the subgraphs shared)."""
    from lite.engines.numpy_engine import NumpyEngine

    graph = model.main
    body = ir.Graph(name=f"{graph.name}/numpy{index}", tensors=graph.tensors, nodes=part.nodes,
                    inputs=part.inputs, outputs=part.outputs)
    sub = ir.Model(graphs=[body, *model.graphs[1:]], opset_imports=model.opset_imports,
                   metadata=model.metadata, version=model.version)
    return NumpyEngine(sub, custom_ops)
