"""What the numpy engine's fusion tests share: a node bound to its kernel as the engine binds it,
the graph run node by node with no fusion, and the op types of the steps an engine planned."""

from __future__ import annotations

from lite.engines.numpy_binding import KernelBinder
from lite.engines.numpy_engine import NumpyEngine
from lite.format import ir
from lite.ops import fused_activation


def bind_node(engine: NumpyEngine, node: ir.Node):
    """``node`` of the main graph as the engine's step for it before folding and fusion."""
    return KernelBinder(engine.model, engine.opsets, engine.custom_ops, engine.float16_in_float32).bind(node, 0)


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
        step = bind_node(engine, node)
        args = [values.get(i) if i >= 0 else None for i in step.inputs]
        result = step.fn(*args, **step.keywords)
        results = result if type(result) is tuple else (result,)
        if step.activation is not None and not step.kernel_applies_activation:
            results = (fused_activation.apply(results[0], *step.activation), *results[1:])
        values.update((index, value) for index, value in zip(node.outputs, results) if index >= 0)
    return {plan.graph.tensors[i].name: values[i] for i in plan.graph.outputs}
