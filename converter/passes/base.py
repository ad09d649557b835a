"""What every pass shares: its result record, the rewrite-rule shape, and graph helpers.

A pass is a callable ``pass_(model, context) -> PassResult``. Most passes are built from a
:class:`RewriteRule`, in three steps (the shape of onnxscript's rewriter, written anew here):

- ``match(node)``: the *pattern*, a cheap structural test anchored at one node; it returns a match
  object, or ``None`` when the pattern is simply not there (nothing is reported);
- ``check(match)``: the conditions that make the rewrite *safe*; it returns ``None`` to go ahead,
  or the reason for declining, which the report lists with the node's name;
- ``rewrite(match)``: changes the graph and returns a one-line description of what it did.
"""

from __future__ import annotations

import abc
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from converter.errors import PassError
from lite.format.ir import fresh_name


@dataclass
class PassResult:
    """What one pass did: how many rewrites, each one described, and every declined match."""

    name: str
    changed: int = 0
    details: list[str] = field(default_factory=list)
    declined: list[str] = field(default_factory=list)
    seconds: float = 0.0
    counts: Counter = field(default_factory=Counter)  # per kind (e.g. folded op types)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "changed": self.changed,
            "counts": dict(self.counts),
            "details": self.details,
            "declined": self.declined,
            "seconds": round(self.seconds, 4),
        }


@dataclass
class PassContext:
    """Options the passes read and the warnings they leave for the report."""

    warnings: list[str] = field(default_factory=list)
    max_folded_bytes: int = 1 << 20  # constant folding never materializes a larger new weight...
    max_folded_growth: float = 2.0  # ...that is also this many times larger than its inputs
    max_folded_elements: int = 64 << 20  # nor evaluates a node whose outputs would hold more
    names: set[str] = field(default_factory=set)  # value and node names in use (see model_names)

    def unique_name(self, base: str) -> str:
        return fresh_name(base, self.names)


Pass = Callable[[ir.Model, PassContext], PassResult]


class RewriteRule(abc.ABC):
    """One pattern → check → rewrite rule (see the module docstring)."""

    name: str = ""
    context: PassContext  # set by the pass before it runs the rule

    @abc.abstractmethod
    def match(self, node: ir.Node) -> Any | None: ...

    def check(self, match: Any) -> str | None:
        return None

    @abc.abstractmethod
    def rewrite(self, match: Any) -> str: ...


class RulePass:
    """A pass that applies its rules at every node of every graph, in graph order."""

    def __init__(self, name: str, rules: list[RewriteRule], doc: str = "") -> None:
        self.name = name
        self.rules = rules
        self.__doc__ = doc

    def __call__(self, model: ir.Model, context: PassContext) -> PassResult:
        result = PassResult(self.name)
        for rule in self.rules:
            rule.context = context
        started = time.perf_counter()
        for graph in all_graphs(model):
            for node in list(graph):
                for rule in self.rules:
                    if node.graph is not graph:  # removed by an earlier rewrite
                        break
                    self._apply(rule, node, result)
        result.seconds = time.perf_counter() - started
        return result

    @staticmethod
    def _apply(rule: RewriteRule, node: ir.Node, result: PassResult) -> None:
        match = rule.match(node)
        if match is None:
            return
        try:
            reason = rule.check(match)
        except Exception as err:
            raise PassError(f"{rule.name}: checking {describe(node)} failed: {err}") from err
        if reason is not None:
            result.declined.append(f"{describe(node)}: {reason}")
            return
        try:
            detail = rule.rewrite(match)
        except Exception as err:
            raise PassError(f"{rule.name}: rewriting {describe(node)} failed: {err}") from err
        result.changed += 1
        result.counts[rule.name] += 1
        result.details.append(detail)


# --- graph helpers ---------------------------------------------------------------------------


def all_graphs(model: ir.Model) -> list[ir.Graph]:
    return [model.graph, *model.graph.subgraphs()]


def describe(node: ir.Node) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} (unnamed)"


def opset_version(model_or_graph: ir.Model | ir.Graph, domain: str = "") -> int:
    imports = model_or_graph.opset_imports
    return int(imports.get(domain, imports.get("ai.onnx", 1) if domain == "" else 1))


def constant(value: ir.Value | None) -> np.ndarray | None:
    """The value of a constant tensor (initializer or Constant output), else None.

    A graph input is never constant, even when it has an initializer (a default the caller may
    override).
    """
    if value is None or value.is_graph_input():
        return None
    tensor = value.const_value
    if tensor is None:
        producer = value.producer()
        if producer is None or producer.op_type != "Constant" or producer.domain != "":
            return None
        try:
            tensor = ir.convenience.get_const_tensor(value)
        except ValueError:
            return None
        if tensor is None:
            return None
    return tensor.numpy()


def sole_consumer(value: ir.Value) -> ir.Node | None:
    """The one node reading ``value``, or None if several (or none) do, or it is a graph output."""
    if value.is_graph_output():
        return None
    users = value.uses()
    nodes = {use.node for use in users}
    if len(nodes) != 1:
        return None
    return next(iter(nodes))


def foldable_weight(value: ir.Value | None, reader: ir.Node) -> str | None:
    """Why ``value`` cannot be rewritten in place as a weight of ``reader``, or None if it can.

    Folding changes the stored numbers, so the weight must be an initializer (not a graph input,
    which the caller can override) that nothing but ``reader`` reads, and not a graph output.
    """
    if value is None:
        return None
    if value.is_graph_input():
        return f"weight {value.name!r} is a graph input (the caller may override it)"
    if not value.is_initializer() or value.const_value is None:
        return f"weight {value.name!r} is not a constant initializer"
    if value.is_graph_output():
        return f"weight {value.name!r} is also a graph output"
    readers = {use.node for use in value.uses()}
    if readers != {reader}:
        return f"weight {value.name!r} is shared with {len(readers) - 1} other node(s)"
    if value.graph is not reader.graph:
        return f"weight {value.name!r} belongs to an enclosing graph"
    return None


def set_constant(value: ir.Value, array: np.ndarray) -> None:
    """Replace the data of an initializer that only the rewritten node reads."""
    value.const_value = ir.tensor(np.asarray(array, order="C"), name=value.name)
    value.shape = ir.Shape(array.shape)
    value.dtype = value.const_value.dtype


def add_initializer(graph: ir.Graph, array: np.ndarray, name: str) -> ir.Value:
    """A new initializer of ``graph``; ``name`` must come from :meth:`PassContext.unique_name`."""
    tensor = ir.tensor(np.asarray(array, order="C"), name=name)
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def model_names(model: ir.Model) -> set[str]:
    """Every value and node name in the model; ONNX names are unique across a graph and its
    subgraphs. Node names too: passes name new nodes from the same set, and ONNX Runtime refuses
    a graph that names two nodes alike."""
    names: set[str] = set()
    for graph in all_graphs(model):
        names.update(v.name for v in graph.inputs if v.name)
        names.update(graph.initializers)
        for node in graph:
            names.update(v.name for v in node.outputs if v.name)
            if node.name:
                names.add(node.name)
    return names


def replace_output(old: ir.Value, new: ir.Value) -> None:
    """Make every reader of ``old`` (and the graph outputs) read ``new`` instead.

    When ``old`` is a graph output, ``new`` takes over its name, so the model's interface is
    unchanged: its declared type and shape too, where ``new`` has none (shape inference knows no
    types for ops such as ai.onnx.ml's TreeEnsembleClassifier, whose outputs an exporter declares).
    """
    if old.is_graph_output():
        name = old.name
        old.name = None
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        new.name = name
        if new.type is None and old.type is not None:
            new.type = old.type
        if new.shape is None and old.shape is not None:
            new.shape = old.shape
    else:
        old.replace_all_uses_with(new)


def attribute(node: ir.Node, name: str, default: Any) -> Any:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def remove_nodes(graph: ir.Graph, nodes: list[ir.Node]) -> None:
    graph.remove(nodes, safe=True)
