"""Model-local functions (ONNX IR spec, "Functions"): bounded, then inlined into the main graph.

Inlining copies a function's body at every call site, so its cost is the size of the fully
expanded graph, not of the file: a function calling another ``k`` times, nested ``n`` deep,
expands to ``k**n`` nodes, and a 1 KB model can ask for hundreds of millions. Before anything is
copied, :func:`inline_functions` computes the expanded size of each function once (memoized, so
the check is linear in the file) and refuses the model, naming the function, when inlining would
add more than :data:`MAX_INLINED_NODES` nodes or calls nest deeper than :data:`MAX_NESTING`.
Functions the main graph never calls are dropped first: conversion never needs them, and
onnx_ir's InlinePass would otherwise expand their bodies too.

The node count alone does not bound the time: onnx_ir's inliner names each copied node and value
by probing ``name``, ``name_2``, ``name_3``, ... until one is free, so ``k`` copies of one name cost
``k**2 / 2`` probes (longer names cost more per probe). 2,048 copies of one function body (a 1 KB
file) took 12 s to inline, 4,096 over a minute. Real exports name nodes apart and call a function
tens or hundreds of times, so their copies share few names. The probes are counted before
inlining, per function and memoized, and a model needing more than :data:`MAX_NAME_PROBES` is
refused.
"""

from __future__ import annotations

from collections import Counter

import onnx_ir as ir
import onnx_ir.passes.common as ir_passes
from onnx_ir.traversal import RecursiveGraphIterator

from converter.errors import ModelImportError

MAX_INLINED_NODES = 1_000_000  # nodes inlining may add; conversion time grows with it
MAX_NESTING = 64  # calls within calls; exporters nest a few levels (module -> submodule)
# Name probes inlining may make (see above), 0.25 to 0.6 µs each: 3 to 7 s. About a node and a
# value name per node, each copied as often as its function is called: a 30,000-node model whose
# functions are called 100 times each needs about 3 M (48 Transformer layers exported as functions,
# 3,936 nodes: 0.2 M).
MAX_NAME_PROBES = 12_000_000


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
    _check_name_probes(model, what)
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


def _check_name_probes(model: ir.Model, what: str) -> None:
    """Refuse a model whose copies share names so much that naming them is quadratic (see above)."""
    names = _InlinedNames(model.functions)
    copies: Counter[tuple[str, str]] = Counter()
    for node in RecursiveGraphIterator(model.graph):
        key = node.op_identifier()
        if key in model.functions:
            copies.update(names.of_function(key))
    # A probe formats and hashes the name: 0.4 µs, twice that at 1,000 characters.
    probes = sum(count * (count + 1) // 2 * (1 + len(name) // 512) for (_, name), count in copies.items())
    if probes <= MAX_NAME_PROBES:
        return
    (kind, name), count = copies.most_common(1)[0]
    raise ModelImportError(
        f"{what}: inlining the model-local functions would copy the {kind} name {name!r} {count:,} times; "
        f"naming the copies apart takes {probes:,} steps, more than the limit of {MAX_NAME_PROBES:,} "
        "(the functions are called too often with the same names); the model is damaged or hostile"
    )


class _InlinedNames:
    """How many copies of each node and value name inlining a function makes, calls included.

    The inliner names an unnamed node ``node`` and an unnamed value ``val``; a call inside a
    function is copied (and named) before its own body is."""

    def __init__(self, functions: dict[ir.OperatorIdentifier, ir.Function]) -> None:
        self.functions = functions
        self.copies: dict[ir.OperatorIdentifier, Counter[tuple[str, str]]] = {}

    def of_function(self, key: ir.OperatorIdentifier) -> Counter[tuple[str, str]]:
        if key in self.copies:
            return self.copies[key]
        copies: Counter[tuple[str, str]] = Counter()
        for node in RecursiveGraphIterator(self.functions[key]):
            copies[("node", node.name or "node")] += 1
            for output in node.outputs:
                copies[("value", output.name or "val")] += 1
            callee = node.op_identifier()
            if callee in self.functions:
                copies.update(self.of_function(callee))
        self.copies[key] = copies
        return copies
