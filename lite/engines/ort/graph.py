"""Graph facts the ONNX Runtime engine needs without importing onnx (partitioning, node names).

Kept apart from :mod:`lite.engines.ort.lower` so that a warm start, whose optimized session comes
from the on-disk cache, never imports onnx.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from lite.format import ir


def reads(model: ir.Model, graph: ir.Graph, nodes: Sequence[ir.Node]) -> set[int]:
    """Indices of ``graph``'s tensors that ``nodes`` read, directly or through their bodies' captures."""
    index_of = {t.name: i for i, t in enumerate(graph.tensors)}
    result = set()
    for node in nodes:
        result.update(i for i in node.inputs if i >= 0)
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                bodies = [attribute.value]
            elif attribute.type == ir.AttributeType.GRAPHS:
                bodies = attribute.value
            else:
                continue
            for body_index in bodies:
                body = model.graphs[body_index]
                for captured in body.captures:
                    index = index_of.get(body.tensors[captured].name)
                    if index is not None:
                        result.add(index)
    return result


def node_name(node: ir.Node, position: int) -> str:
    """The node's name, or ``OpType_position`` for an unnamed node (ONNX Runtime's errors then name one node)."""
    return node.name or f"{node.op_type}_{position}"


def lowering_fingerprint() -> str:
    """Changes whenever the lowering code changes, so cached sessions of older lowerings are not reused."""
    digest = hashlib.sha256()
    folder = Path(__file__).parent
    for name in ("lower.py", "half.py", "graph.py"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()[:16]
