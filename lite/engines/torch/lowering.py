"""Lowering a .lite graph (or a run of its nodes) to a ``torch.fx.GraphModule``.

Each node becomes one ``call_function`` of its lowering (:mod:`lite.engines.torch.ops`), with the
node's attributes as keyword arguments; a converter-fused activation becomes a second call
unless the lowering applies it itself. Constants are the module's buffers (``get_attr``), except
small integer vectors and inputs a lowering reads on the host (shapes, axes, scales), which are
passed as Python values. Nodes whose inputs are all constants are evaluated here, once (the
``Cast(to=FLOAT)`` of every float16 weight of a model converted with ``--fp16``, for instance).

Precision and layout are a :class:`Policy`: under half compute ONNX FLOAT means float16
(constants, casts, float32 inputs cast on entry), and float32 outputs are cast back on exit, so
callers see the types the model declares. On CUDA, 4-D inputs and convolution weights are made
channels-last, the layout tensor cores read fastest.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import fx

from lite.engines.torch.ops import LOWERINGS, Lowering, apply_activation
from lite.engines.torch.ops._values import ArrayAttribute
from lite.engines.torch.ops.dtypes import COMPUTE_TYPES, torch_dtype
from lite.format import fused_activation, ir
from lite.format.dtypes import DataType, float32_to_float16_clamped
from lite.format.values import attribute_value, tensor_value
from lite.ops.registry import KernelRegistry, normalize_domain

_ENGINE_ATTRIBUTES = {fused_activation.ATTRIBUTE, fused_activation.PARAMS_ATTRIBUTE, "consumed_inputs"}
_HOST_CONSTANT_MAX = 64  # integer vectors up to this size are passed as Python values
_STATIC_MAX = 4096


@dataclass(frozen=True)
class Policy:
    """Where and how a lowered graph computes."""

    device: torch.device
    float_type: torch.dtype = torch.float32  # what ONNX FLOAT computes in
    channels_last: bool = False


def unmapped_reason(node: ir.Node, graph: ir.Graph, opset: int, custom_ops: KernelRegistry | None) -> str | None:
    """None when the torch engine lowers ``node``; else why it stays on the numpy engine."""
    domain = normalize_domain(node.domain)
    if custom_ops is not None and custom_ops.select(node.op_type, domain, 1 << 30) is not None:
        return "custom op"
    if domain:
        return f"domain {domain!r}"
    entry = LOWERINGS.select(node.op_type, opset)
    if entry is None:
        return "no torch lowering" if node.op_type not in LOWERINGS else f"no torch lowering at opset {opset}"
    attributes = {}
    for name, attribute in node.attributes.items():
        if attribute.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            return f"subgraph attribute {name!r}"
        if name in _ENGINE_ATTRIBUTES:
            continue
        if not entry.accepts(name):
            return f"attribute {name!r}"
        attributes[name] = attribute_value(attribute)
    if fused_activation.ATTRIBUTE in node.attributes:
        name, params = _activation(node)
        reason = fused_activation.check(name, params)
        if reason:
            return reason
    for index in (*node.inputs, *node.outputs):
        if index < 0:
            continue
        tensor = graph.tensors[index]
        if not tensor.is_constant and tensor.dtype != DataType.UNDEFINED and tensor.dtype not in COMPUTE_TYPES:
            return f"{tensor.dtype.name} tensor {tensor.name!r}"
        if tensor.is_constant and tensor.dtype == DataType.STRING:
            return f"string constant {tensor.name!r}"
    if entry.check is not None:
        return entry.check(attributes)
    return None


def _activation(node: ir.Node) -> tuple[str, tuple[float, ...]]:
    name = attribute_value(node.attributes[fused_activation.ATTRIBUTE])
    params = node.attributes.get(fused_activation.PARAMS_ATTRIBUTE)
    return name, tuple(attribute_value(params)) if params else ()


def _output(result: Any, position: int) -> Any:
    return result[position]


def _enter(x: torch.Tensor, float_type: torch.dtype, channels_last: bool) -> torch.Tensor:
    """A graph input in the compute precision and layout."""
    if x.dtype == torch.float32 and float_type != torch.float32:
        x = x.to(float_type)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _exit(x: Any, declared: torch.dtype | None) -> Any:
    """A graph output in the type the model declares (float32 outputs computed in half precision)."""
    if declared is not None and isinstance(x, torch.Tensor) and x.dtype != declared and x.is_floating_point():
        return x.to(declared)
    return x


def _buffer_name(name: str, index: int) -> str:
    return f"c{index}_" + re.sub(r"\W", "_", name)[:40]


class _Builder:
    def __init__(self, model: ir.Model, graph: ir.Graph, policy: Policy) -> None:
        self.model = model
        self.graph = graph
        self.policy = policy
        self.opset = {normalize_domain(d): v for d, v in model.opset_imports.items()}.get("", 1)
        self.fx = fx.Graph()
        self.root = torch.nn.Module()
        self.values: dict[int, fx.Node] = {}  # tensor index -> FX value
        self.constants: dict[int, Any] = {}  # tensor index -> tensor or host value (folded)
        self.buffers: dict[int, fx.Node] = {}
        self.conv_weights: set[int] = set()

    # -- constants -----------------------------------------------------------------------------
    def constant(self, index: int) -> Any | None:
        """The value of a constant tensor (a graph constant or a folded node output), else None."""
        if index in self.constants:
            return self.constants[index]
        tensor = self.graph.tensors[index]
        if not tensor.is_constant:
            return None
        array = tensor_value(tensor)
        if array.dtype.kind in "iub" and array.ndim <= 1 and array.size <= _HOST_CONSTANT_MAX:
            value: Any = array.tolist()
        else:
            value = self.to_torch(array)
        self.constants[index] = value
        return value

    def to_torch(self, array: np.ndarray) -> torch.Tensor:
        if array.dtype == np.float32:
            dtype = self.policy.float_type
            if dtype == torch.float16:
                array = float32_to_float16_clamped(array)
        else:
            dtype = torch.from_numpy(np.empty(0, array.dtype)).dtype
        with warnings.catch_warnings():
            # Weights are read-only views of the mapped file; the lowerings never write into them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.policy.device.type == "cpu" and tensor.dtype == dtype:
            return tensor  # shares memory with the mapped file
        return tensor.to(device=self.policy.device, dtype=dtype)

    def argument(self, index: int, static: bool) -> Any:
        """An input of a node: an FX value, a buffer, or a Python value."""
        if index < 0:
            return None
        if index in self.values:
            return self.values[index]
        value = self.constant(index)
        if value is None:
            raise KeyError(f"tensor {self.graph.tensors[index].name!r} is read before it is produced")
        if not isinstance(value, torch.Tensor):
            return value
        if static and value.numel() <= _STATIC_MAX and value.dim() <= 1:
            return value.tolist() if value.dim() else value.item()
        return self.buffer(index, value)

    def buffer(self, index: int, value: torch.Tensor) -> fx.Node:
        if index not in self.buffers:
            if self.policy.channels_last and index in self.conv_weights and value.dim() == 4:
                value = value.contiguous(memory_format=torch.channels_last)
            name = _buffer_name(self.graph.tensors[index].name, index)
            self.root.register_buffer(name, value, persistent=False)
            self.buffers[index] = self.fx.get_attr(name)
        return self.buffers[index]

    # -- nodes ---------------------------------------------------------------------------------
    def add_node(self, node: ir.Node) -> None:
        entry = LOWERINGS.select(node.op_type, self.opset)
        inputs = list(node.inputs)
        while inputs and inputs[-1] < 0:
            inputs.pop()
        kwargs = {name: _literal(attribute_value(a)) for name, a in node.attributes.items()
                  if name not in _ENGINE_ATTRIBUTES}
        activation = _activation(node) if fused_activation.ATTRIBUTE in node.attributes else None
        engine = {"float_type": self.policy.float_type, "device": self.policy.device, "opset": self.opset,
                  "output_count": len(node.outputs), "fused_activation": activation}
        kwargs.update({name: engine[name] for name in entry.engine_parameters})
        applies_activation = "fused_activation" in entry.engine_parameters
        folded = self.fold(node, entry, inputs, kwargs, activation, applies_activation)
        if folded:
            return
        args = tuple(self.argument(i, position in entry.static_inputs) for position, i in enumerate(inputs))
        result = self.fx.call_function(entry.fn, args, kwargs)
        if activation is not None and not applies_activation:
            result = self.fx.call_function(apply_activation, (result, *activation))
        if len(node.outputs) == 1:
            self.values[node.outputs[0]] = result
            return
        for position, index in enumerate(node.outputs):
            if index >= 0:
                self.values[index] = self.fx.call_function(_output, (result, position))

    def fold(self, node: ir.Node, entry: Lowering, inputs: list[int], kwargs: dict[str, Any],
             activation, applies_activation: bool) -> bool:
        """Evaluate a node whose inputs are all constants now; True when it was."""
        if any(i >= 0 and i in self.values for i in inputs):
            return False
        values = [None if i < 0 else self.constant(i) for i in inputs]
        if any(v is None for v, i in zip(values, inputs) if i >= 0):
            return False
        with torch.no_grad():
            result = entry.fn(*values, **kwargs)
            if activation is not None and not applies_activation:
                result = apply_activation(result, *activation)
        results = result if len(node.outputs) > 1 else (result,)
        for index, value in zip(node.outputs, results):
            if index >= 0:
                self.constants[index] = value
        return True

    def output_value(self, index: int) -> Any:
        if index in self.values:
            return self.values[index]
        value = self.constant(index)
        return self.buffer(index, value) if isinstance(value, torch.Tensor) else value


def _literal(value: Any) -> Any:
    """An attribute value as the generated code can spell it (numpy arrays as ArrayAttribute)."""
    return ArrayAttribute.of(value) if isinstance(value, np.ndarray) else value


def build_module(model: ir.Model, nodes: list[ir.Node], inputs: list[int], outputs: list[int],
                 policy: Policy) -> fx.GraphModule:
    """A GraphModule taking ``inputs`` (tensors, in order) and returning ``outputs`` as a tuple."""
    graph = model.main
    builder = _Builder(model, graph, policy)
    builder.conv_weights = {n.inputs[1] for n in nodes if n.op_type == "Conv" and len(n.inputs) > 1}
    for index in inputs:
        placeholder = builder.fx.placeholder(re.sub(r"\W", "_", f"in_{graph.tensors[index].name}"))
        builder.values[index] = builder.fx.call_function(
            _enter, (placeholder, policy.float_type, policy.channels_last and policy.device.type == "cuda"))
    for node in nodes:
        builder.add_node(node)
    exits = []
    for index in outputs:
        declared = graph.tensors[index].dtype
        wanted = torch_dtype(declared) if declared in COMPUTE_TYPES else None
        exits.append(builder.fx.call_function(_exit, (builder.output_value(index), wanted)))
    builder.fx.output(tuple(exits))
    return fx.GraphModule(builder.root, builder.fx, class_name="LiteGraph")
