"""CUDA custom kernels between the torch engine's compiled segments, on the engine's tensors.

A run of custom nodes registered with CUDA kernels (``CustomOps.library(..., device="cuda")``,
MindSpore's AOT signature) is a segment of its own in the torch engine
(:mod:`lite.engines.torch.engine`), as in the ONNX Runtime engine
(:mod:`lite.engines.ort.device_kernels`): the kernels read and write torch tensors on the GPU,
so the data never leaves the device between the compiled segments around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lite.format import ir
from lite.format.values import tensor_value


class DeviceKernels:
    """A run of custom nodes whose CUDA kernels (MindSpore's AOT signature) run on the GPU: each
    gets the device pointers of its inputs (torch tensors, attributes named in
    ``attributes_as_inputs`` appended as small device tensors) and of outputs allocated on the
    device, and the current CUDA stream, so the data never leaves the GPU."""

    def __init__(self, graph: ir.Graph, nodes: list[ir.Node], kernels: list[Any], device: torch.device) -> None:
        from lite.custom_ops import attribute_inputs
        from lite.format.values import attribute_value

        self.steps = []
        for node, kernel in zip(nodes, kernels):
            attributes = {name: attribute_value(a) for name, a in node.attributes.items()}
            extras = [torch.from_numpy(a).to(device)
                      for a in attribute_inputs(kernel.label, kernel.attributes_as_inputs, attributes)]
            inputs = [graph.tensors[i] if i >= 0 else None for i in node.inputs]
            constants = {position: torch.from_numpy(np.ascontiguousarray(tensor_value(t))).to(device)
                         for position, t in enumerate(inputs) if t is not None and t.is_constant}
            names = [None if t is None else t.name for t in inputs]
            outputs = [graph.tensors[i].name for i in node.outputs if i >= 0]
            self.steps.append((kernel, names, constants, extras, outputs))

    def run(self, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from lite.custom_ops import run_device_kernel

        produced: dict[str, torch.Tensor] = {}
        for kernel, names, constants, extras, outputs in self.steps:
            inputs = [constants[i] if i in constants else produced.get(name, values.get(name))
                      for i, name in enumerate(names)]
            results = run_device_kernel(kernel, [*inputs, *extras], inputs)
            produced.update(zip(outputs, results))
        return produced
