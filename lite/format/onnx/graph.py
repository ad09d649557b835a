"""Graph facts the ONNX lowering and its users need without importing onnx.

Node names and the lowering's fingerprint. Kept apart from :mod:`lite.format.onnx.lower` so that
a warm start, whose optimized session or compiled model comes from an engine's on-disk cache,
never imports onnx.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lite.format import ir


def node_name(node: ir.Node, position: int) -> str:
    """The node's name, or ``OpType_position`` for an unnamed node (ONNX Runtime's errors then name one node)."""
    return node.name or f"{node.op_type}_{position}"


def lowering_fingerprint(*also: Path) -> str:
    """Changes whenever the lowering code, or one of the files ``also`` names, changes.

    Engines key their on-disk caches on it, so a cached session or compiled model of an older
    lowering is not reused; they name their own rewrites of the lowered model in ``also``.
    """
    digest = hashlib.sha256()
    folder = Path(__file__).resolve().parent
    for path in (folder / "lower.py", folder / "graph.py", folder.parent / "ir.py", folder.parent / "values.py", *also):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
