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
# ONNX Runtime's own domains: its quantizer and transformer optimizer write com.microsoft ops, and a
# model saved at its ALL optimization level holds com.microsoft.nchwc ones (convolutions on its CPU
# kernels' blocked channel layout). lite's ONNX Runtime engines run them.
ONNX_RUNTIME_DOMAINS = frozenset({"com.microsoft", "com.microsoft.nchwc"})


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


def onnx_runtime_ops_warning(unsupported: list[tuple[str, str, str]], domains: set[str]) -> str:
    """The warning for a model whose only nodes without a numpy kernel are ONNX Runtime's own
    (``domains`` within :data:`ONNX_RUNTIME_DOMAINS`): where it runs, and, for the nchwc layout,
    how to get a model that runs elsewhere."""
    ops = ", ".join(sorted({op for _, op, _ in unsupported}))
    where = f"{' and '.join(sorted(domains))} domain{'s' if len(domains) > 1 else ''}"
    if "com.microsoft.nchwc" not in domains:
        return (f"{len(unsupported)} node(s) of ONNX Runtime's {where} ({ops}) have no numpy kernel: the model "
                "runs on lite's ONNX Runtime engines (device='cpu' or 'cuda'), not on the numpy engine")
    return (f"{len(unsupported)} node(s) of ONNX Runtime's {where} ({ops}) have no numpy kernel; the "
            "com.microsoft.nchwc ones are ONNX Runtime's CPU-specific blocked layout, written when it saves a model "
            "at its ALL optimization level: the model runs on ONNX Runtime's CPU kernels (device='cpu'), not on the "
            "numpy engine. For a model that runs everywhere, save the optimized original at ORT_ENABLE_EXTENDED "
            "(SessionOptions.graph_optimization_level), or convert it before ONNX Runtime optimized it")
