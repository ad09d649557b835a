"""Names across graphs for the numpy engine: what a body (an If branch, a Loop or Scan body)
reads from the graphs around it.

A body reads the enclosing graphs' tensors by name (ONNX's outer-scope references). At run time
:class:`Scope` resolves such a name to the nearest enclosing graph's current value. At load,
:class:`OuterConstants` finds the captures that name an enclosing graph's constant (exporters keep
a model's weights in the main graph and read them inside the branches), so a body's kernels are
prepared on them as the main graph's are (lite.ops.registry's ``prepare``): silero's voice
detector, one If branch per sampling rate, built its convolutions' layers again on every call
(its torch.export file: 1.03-1.55 -> 0.38-0.68 ms a call, `lite bench`, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lite.errors import ModelFormatError
from lite.format import ir
from lite.format.values import tensor_value

if TYPE_CHECKING:
    from lite.engines.numpy_engine import _GraphPlan


class Scope:
    """Names visible to a subgraph: the enclosing graph's current values, then its scope."""

    def __init__(self, plan: _GraphPlan, values: list[Any], parent: Scope | None) -> None:
        self.plan = plan
        self.values = values
        self.parent = parent

    def lookup(self, name: str) -> np.ndarray:
        index = self.plan.index_of.get(name)
        if index is not None and self.values[index] is not None:
            return self.values[index]
        if self.parent is None:
            raise ModelFormatError(f"a subgraph reads {name!r}, which no enclosing graph defines")
        return self.parent.lookup(name)


class OuterConstants:
    """The constants of a model's graphs that its bodies capture by name, and every name they
    capture."""

    def __init__(self, model: ir.Model, canonical) -> None:
        self.model = model
        self.canonical = canonical  # the engine's form of a constant's value
        self.parents: dict[int, int] = {}
        for index, graph in enumerate(model.graphs):
            for node in graph.nodes:
                for attribute in node.attributes.values():
                    if attribute.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                        value = attribute.value
                        for body in value if isinstance(value, list) else [value]:
                            self.parents[body] = index
        self._names: dict[int, dict[str, ir.Tensor]] = {}
        # Every name a body reads from outside it (kept by the enclosing graphs' fusions).
        self.captured_names = {graph.tensors[i].name for graph in model.graphs for i in graph.captures}

    def captured(self, graph_index: int) -> dict[int, Any]:
        """The captures of body ``graph_index`` naming a constant of the nearest enclosing graph
        that defines the name (as :class:`Scope` resolves it), by the body's tensor index."""
        graph = self.model.graphs[graph_index]
        found: dict[int, Any] = {}
        for index in graph.captures:
            name = graph.tensors[index].name
            outer = self.parents.get(graph_index)
            while outer is not None:
                tensor = self._by_name(outer).get(name)
                if tensor is not None:
                    if tensor.is_constant:
                        found[index] = self.canonical(tensor_value(tensor))
                    break
                outer = self.parents.get(outer)
        return found

    def _by_name(self, graph_index: int) -> dict[str, ir.Tensor]:
        names = self._names.get(graph_index)
        if names is None:
            names = self._names[graph_index] = {t.name: t for t in self.model.graphs[graph_index].tensors}
        return names
