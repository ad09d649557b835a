"""Which nodes the runtime can run: op types (and attributes) that ``lite.ops.KERNELS`` has.

Every node of every graph is checked against the kernel chosen for the model's opset
(``KernelRegistry.select``); a node is unsupported when no kernel matches, or when it carries an
attribute the kernel does not take (``fused_activation*`` excepted: the runtime applies those
itself). All unsupported nodes are collected before anything is reported, so one conversion run
lists them all.
"""

from __future__ import annotations

import inspect

from lite.format import ir as lite_ir
from lite.ops.registry import KERNELS, KernelRegistry

_RUNTIME_ATTRIBUTES = {"fused_activation", "fused_activation_params"}


def unsupported_nodes(model: lite_ir.Model, registry: KernelRegistry | None = None) -> list[tuple[str, str, str]]:
    """``(node name, op type, reason)`` for every node no kernel can run."""
    return [(name, op_type, reason) for name, op_type, reason, _ in _unsupported(model, registry)]


def unsupported_domains(model: lite_ir.Model, registry: KernelRegistry | None = None) -> set[str]:
    """The domains of the nodes no kernel can run ("" for ai.onnx)."""
    return {domain for _, _, _, domain in _unsupported(model, registry)}


def _unsupported(model: lite_ir.Model, registry: KernelRegistry | None) -> list[tuple[str, str, str, str]]:
    if registry is None:
        import lite.ops  # noqa: F401  (importing registers the kernels)

        registry = KERNELS
    found = []
    for graph_index, graph in enumerate(model.graphs):
        where = "" if graph_index == 0 else f" (in subgraph {graph.name or graph_index})"
        for position, node in enumerate(model.graphs[graph_index].nodes):
            name = node.name or f"#{position}{where}"
            domain = node.domain or ""
            opset = model.opset_imports.get(domain, model.opset_imports.get("ai.onnx", 0) if not domain else 0)
            kernel = registry.select(node.op_type, domain, opset)
            qualified = f"{domain or 'ai.onnx'}::{node.op_type}"
            if kernel is None:
                versions = registry.versions(node.op_type, domain)
                reason = (
                    f"no kernel for {qualified} at opset {opset} (kernels exist from opset {versions[0]})"
                    if versions
                    else f"no kernel for {qualified}"
                )
                found.append((name + where if node.name else name, node.op_type, reason, domain))
                continue
            if _takes_any_keyword(kernel.fn):
                continue
            extra = sorted(set(node.attributes) - kernel.attribute_names - _RUNTIME_ATTRIBUTES)
            if extra:
                found.append((name, node.op_type, f"attributes {extra} are not implemented by the {qualified} kernel",
                              domain))
    return found


def _takes_any_keyword(fn) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
