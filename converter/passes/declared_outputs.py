"""Graph outputs declared with a shape the graph contradicts.

Exporters sometimes declare an output's shape wrongly: paddle2onnx writes PP-OCRv5's outputs as
scalars (shape ``[]``) though the Sigmoid that makes the detector's map gives ``[N, 1, H, W]``.
ONNX Runtime ignores declared output shapes and returns what the graph computes. ONNX's strict
shape inference stops at the contradiction ("Inferred shape and existing shape differ in rank:
(4) vs (0)") and the non-strict pass keeps the declaration, so the converted model's signature
said ``shape=()`` while ``predict`` returned 4-D arrays.

So the declared shapes of the main graph's node outputs are set aside while inference runs, then
put back merged with what inference found, as ONNX merges them (an inferred size fills a
symbolic or unknown one; a declared size or name stays). Where the ranks differ, the inferred
shape stands and the conversion says so in a warning.
"""

from __future__ import annotations

import onnx_ir as ir

Declared = list[tuple[ir.Value, ir.Shape]]


def set_aside_declared_output_shapes(model: ir.Model) -> Declared:
    """Clear the declared shapes of the main graph's outputs that a node makes and no node reads;
    return them. (An output other nodes read keeps its declaration through inference: where its
    producer cannot be inferred, a custom op, the declaration is all its readers have.)"""
    declared = [(value, value.shape) for value in model.graph.outputs
                if value.producer() is not None and value.shape is not None and not value.uses()]
    for value, _ in declared:
        value.shape = None
    return declared


def restore_declared_output_shapes(declared: Declared) -> list[str]:
    """Put the declared shapes back, merged with the inferred ones; return a warning per output
    whose declared rank the graph contradicts (that output keeps the inferred shape)."""
    warnings = []
    for value, shape in declared:
        inferred = value.shape
        if inferred is None:
            value.shape = shape
        elif len(inferred) != len(shape):
            warnings.append(
                f"output {value.name!r} is declared with shape {_text(shape)} but its node "
                f"({value.producer().op_type}) makes shape {_text(inferred)}; the converted model declares "
                f"{_text(inferred)}, as ONNX Runtime also ignores the declared shape")
        else:
            value.shape = ir.Shape([_merged(own, found) for own, found in zip(shape, inferred)])
    return warnings


def _merged(declared: int | ir.SymbolicDim, inferred: int | ir.SymbolicDim) -> int | ir.SymbolicDim:
    """One dimension as ONNX's inference merges an existing and an inferred one: a declared size
    stays, an inferred size replaces a declared name, a declared name stays over an inferred one."""
    if isinstance(declared, int) or isinstance(inferred, int):
        return declared if isinstance(declared, int) else inferred
    return declared if declared.value is not None else inferred


def _text(shape: ir.Shape) -> str:
    return "[" + ", ".join(str(dim if isinstance(dim, int) else dim.value or "?") for dim in shape) + "]"
