"""What the numpy engine's fusion tests share: the graph run node by node with no fusion, and the
op types of the steps an engine planned."""

from __future__ import annotations

from lite.engines.numpy_engine import NumpyEngine
from lite.format import ir
from lite.ops import fused_activation


def op_types(engine: NumpyEngine) -> list[str]:
    return [step.node.op_type for step in engine.plans[0].steps]


def node_by_node(model: ir.Model | NumpyEngine, inputs: dict) -> dict:
    """The main graph's outputs with each node run by its own kernel, one after another (what the
    fused steps must reproduce)."""
    engine = model if isinstance(model, NumpyEngine) else NumpyEngine(model)
    plan = engine.plans[0]
    values = dict(plan.constants)
    for index in plan.graph.inputs:
        values[index] = inputs[plan.graph.tensors[index].name]
    for node in engine.model.main.nodes:
        step = engine._plan_node(node, 0, [])
        args = [values.get(i) if i >= 0 else None for i in step.inputs]
        result = step.fn(*args, **step.keywords)
        results = result if type(result) is tuple else (result,)
        if step.activation is not None and not step.kernel_applies_activation:
            results = (fused_activation.apply(results[0], *step.activation), *results[1:])
        values.update((index, value) for index, value in zip(node.outputs, results) if index >= 0)
    return {plan.graph.tensors[i].name: values[i] for i in plan.graph.outputs}
