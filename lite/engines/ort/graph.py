"""Graph facts the ONNX Runtime engine needs without importing onnx (node names, the lowering's fingerprint).

Kept apart from :mod:`lite.engines.ort.lower` so that a warm start, whose optimized session comes
from the on-disk cache, never imports onnx.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lite.format import ir


def node_name(node: ir.Node, position: int) -> str:
    """The node's name, or ``OpType_position`` for an unnamed node (ONNX Runtime's errors then name one node)."""
    return node.name or f"{node.op_type}_{position}"


def lowering_fingerprint() -> str:
    """Changes whenever the lowering code changes, so cached sessions of older lowerings are not reused."""
    digest = hashlib.sha256()
    folder = Path(__file__).parent
    for path in (folder / "lower.py", folder / "half.py", folder / "unsigned.py", folder / "graph.py",
                 folder.parent / "partition.py", folder.parents[1] / "format" / "values.py"):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
