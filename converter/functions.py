"""Model-local functions (ONNX IR spec, "Functions"): bounded, then inlined into the main graph.

Inlining copies a function's body at every call site, so its cost is the size of the fully
expanded graph, not of the file: a function calling another ``k`` times, nested ``n`` deep,
expands to ``k**n`` nodes, and a 1 KB model can ask for hundreds of millions. Before anything is
copied, :func:`inline_functions` computes the expanded size of each function once (memoized, so
the check is linear in the file) and refuses the model, naming the function, when inlining would
add more than :data:`MAX_INLINED_NODES` nodes or calls nest deeper than :data:`MAX_NESTING`.
Functions the main graph never calls are dropped first: conversion never needs them, and
onnx_ir's InlinePass would otherwise expand their bodies too.
"""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as ir_passes
from onnx_ir.traversal import RecursiveGraphIterator

from converter.errors import ModelImportError

MAX_INLINED_NODES = 1_000_000  # nodes inlining may add; conversion time grows with it
MAX_NESTING = 64  # calls within calls; exporters nest a few levels (module -> submodule)


def inline_functions(model: ir.Model, what: str) -> None:
    """Inline every call of a model-local function; raise :class:`ModelImportError` if the
    inlined graph would be too large, functions nest too deep, or a function calls itself."""
    if not model.functions:
        return
    sizes = _ExpandedSizes(model.functions, what)
    inlined = 0
    for node in RecursiveGraphIterator(model.graph):
        key = node.op_identifier()
        if key in model.functions:
            inlined += sizes.of_function(key, ())
    if inlined > MAX_INLINED_NODES:
        largest = max(sizes.sizes, key=sizes.sizes.__getitem__)
        raise ModelImportError(
            f"{what}: inlining the model-local functions would add {inlined:,} nodes to the main graph, more "
            f"than the limit of {MAX_INLINED_NODES:,} (the largest, {_name(largest)}, expands to "
            f"{sizes.sizes[largest]:,}); the model is damaged or hostile"
        )
    for key in [key for key in model.functions if key not in sizes.reached]:
        del model.functions[key]
    try:
        ir_passes.InlinePass()(model)
    except (ir.passes.PreconditionError, ValueError, KeyError) as err:
        raise ModelImportError(f"{what}: cannot inline the model-local functions ({err})") from err


def _name(key: ir.OperatorIdentifier) -> str:
    domain, name, overload = key
    return f"{domain}::{name}" + (f":{overload}" if overload else "")


class _ExpandedSizes:
    """Node counts of graphs and functions with every call replaced by the callee's body."""

    def __init__(self, functions: dict[ir.OperatorIdentifier, ir.Function], what: str) -> None:
        self.functions = functions
        self.what = what
        self.sizes: dict[ir.OperatorIdentifier, int] = {}
        self.reached: set[ir.OperatorIdentifier] = set()

    def of_graph(self, graph: ir.Graph | ir.Function, chain: tuple[ir.OperatorIdentifier, ...]) -> int:
        total = 0
        for node in RecursiveGraphIterator(graph):
            key = node.op_identifier()
            total += self.of_function(key, chain) if key in self.functions else 1
        return total

    def of_function(self, key: ir.OperatorIdentifier, chain: tuple[ir.OperatorIdentifier, ...]) -> int:
        if key in self.sizes:
            return self.sizes[key]
        calls = " -> ".join(_name(k) for k in (*chain, key))
        if key in chain:
            raise ModelImportError(f"{self.what}: model-local function {_name(key)} calls itself ({calls}); "
                                   "ONNX functions cannot recurse")
        if len(chain) >= MAX_NESTING:
            raise ModelImportError(
                f"{self.what}: model-local function calls nest more than {MAX_NESTING} deep ({calls}); "
                "the model is damaged or hostile"
            )
        self.reached.add(key)
        size = self.of_graph(self.functions[key], (*chain, key))
        if size > MAX_INLINED_NODES:
            raise ModelImportError(
                f"{self.what}: model-local function {_name(key)} expands to more than "
                f"{MAX_INLINED_NODES:,} nodes once the functions it calls are inlined (called as {calls}); "
                "the model is damaged or hostile"
            )
        self.sizes[key] = size
        return size
