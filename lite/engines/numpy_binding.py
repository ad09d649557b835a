"""Binding a node to its numpy kernel, once at load: which kernel, with which arguments, or why none.

The numpy engine (:mod:`lite.engines.numpy_engine`) plans a graph as a whole (constant folding,
fusions, lifetimes) and runs it; this is the per-node question before that, asked of the kernel
registry and the model's opsets: the newest kernel not above the node's opset (a user's kernel
first), the node's attributes as the Python values kernels take, its fused activation, and the
trailing omitted inputs dropped so the kernel's defaults apply. A node that cannot run is
collected rather than raised, so the error lists every such node of the model at once and says
how to run them (ONNX Runtime's own ops on lite's ONNX Runtime engine, others with user kernels).
"""

from __future__ import annotations

from typing import Any

from lite.engines import numpy_float16
from lite.engines.numpy_steps import _Step
from lite.errors import UnsupportedOpError
from lite.format import ir
from lite.format.values import attribute_value
from lite.ops import KERNELS, KernelRegistry, fused_activation
from lite.ops.registry import normalize_domain

_ENGINE_ATTRIBUTES = {fused_activation.ATTRIBUTE, fused_activation.PARAMS_ATTRIBUTE}
# Attributes of old opsets that never change results (consumed_inputs was a memory hint before opset 6).
_IGNORED_ATTRIBUTES = {"consumed_inputs"}
# ONNX Runtime's own operators: lite's ONNX Runtime engines run those the numpy engine cannot.
_ONNXRUNTIME_DOMAIN = "com.microsoft"


class KernelBinder:
    """Binds the nodes of ``model`` to kernels, collecting the nodes that cannot run in ``problems``."""

    def __init__(self, model: ir.Model, opsets: dict[str, int], custom_ops: KernelRegistry | None,
                 float16_in_float32: bool) -> None:
        self.model = model
        self.opsets = opsets
        self.custom_ops = custom_ops
        self.float16_in_float32 = float16_in_float32
        self.problems: list[str] = []
        # Labels of the nodes among them that are ONNX Runtime's own ops (its engines run them).
        self.onnxruntime_nodes: list[str] = []

    def bind(self, node: ir.Node, graph_index: int) -> _Step | None:
        """``node`` (of graph ``graph_index``) as a step with its kernel; None when it has none."""
        label = f"node {node.name!r} ({node.domain + '::' if node.domain else ''}{node.op_type})"
        if graph_index:
            label += f" in subgraph {graph_index}"
        domain = normalize_domain(node.domain)
        kernel = None
        if self.custom_ops is not None:
            kernel = self.custom_ops.select(node.op_type, domain, 1 << 30)
        custom = kernel is not None
        if kernel is None:
            version = self.opsets.get(domain)
            if version is None and domain == "":
                version = 1
            if version is not None:
                kernel = KERNELS.select(node.op_type, domain, version)
            if kernel is None:
                available = KERNELS.versions(node.op_type, domain)
                if available:
                    self.problems.append(f"{label}: opset {version} of domain {domain or 'ai.onnx'!r}; kernels "
                                         f"exist from opset {available[0]}")
                else:
                    self.problems.append(f"{label}: no kernel for this op type")
                if domain == _ONNXRUNTIME_DOMAIN:
                    self.onnxruntime_nodes.append(label)
                return None
        attributes: dict[str, Any] = {}
        graph_attributes: dict[str, Any] = {}
        activation = None
        for name, attribute in node.attributes.items():
            if name in _ENGINE_ATTRIBUTES or (name in _IGNORED_ATTRIBUTES and not kernel.accepts(name)):
                continue
            if not kernel.accepts(name):
                self.problems.append(f"{label}: attribute {name!r} is not supported by the {node.op_type} kernel")
                continue
            if attribute.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                graph_attributes[name] = attribute.value
            else:
                attributes[name] = attribute_value(attribute)
        if fused_activation.ATTRIBUTE in node.attributes:
            kind = attribute_value(node.attributes[fused_activation.ATTRIBUTE])
            params_attribute = node.attributes.get(fused_activation.PARAMS_ATTRIBUTE)
            params = tuple(attribute_value(params_attribute)) if params_attribute else ()
            reason = fused_activation.check(kind, params)
            if reason:
                self.problems.append(f"{label}: {reason}")
            activation = (kind, params)
        # Trailing omitted inputs are dropped so the kernel's defaults apply.
        inputs = list(node.inputs)
        while inputs and inputs[-1] < 0:
            inputs.pop()
        fn = kernel.fn
        if self.float16_in_float32:
            fn = numpy_float16.typed_output(node, self.model.graphs[graph_index], fn)
        return _Step(node, fn, inputs, list(node.outputs), attributes, graph_attributes,
                     len(node.outputs) if kernel.wants_output_count else None, activation,
                     kernel_applies_activation=activation is not None and kernel.wants_fused_activation,
                     wants_allocate=kernel.wants_allocate, custom=custom,
                     prepare=None if custom else kernel.prepare)

    def error(self) -> UnsupportedOpError:
        """What the numpy engine cannot run, and the way to run it: ONNX Runtime's own ops on lite's
        ONNX Runtime engine, other custom ops with the user's kernels."""
        listed = "\n  ".join(self.problems)
        message = f"the numpy engine cannot run {len(self.problems)} node(s) of this model:\n  {listed}\n"
        if self.onnxruntime_nodes:
            shown = ", ".join(self.onnxruntime_nodes[:5]) + (", ..." if len(self.onnxruntime_nodes) > 5 else "")
            message += (
                f"{len(self.onnxruntime_nodes)} of them are ONNX Runtime's own ops ({shown}): load the model with "
                "device='cpu' (or 'auto', which picks ONNX Runtime when it is installed) to run them with ONNX "
                "Runtime (pip install onnxruntime), or write numpy kernels for them: "
                "lite.Model.load(path, custom_ops=lite.CustomOps(...))."
            )
        else:
            message += "For custom ops, pass their kernels: lite.Model.load(path, custom_ops=lite.CustomOps(...))."
        return UnsupportedOpError(message)
