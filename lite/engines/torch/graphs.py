"""What the torch engine's compiled artifacts stand on: weights lifted to inputs, CUDA graph
replay, and the GPU architecture an artifact is compiled for."""

from __future__ import annotations

from collections.abc import Callable

import torch


def lift_weights(module: torch.nn.Module) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """``module``'s graph with every ``get_attr`` (a weight) turned into a leading placeholder,
    and the weights in that order: ``lifted(*weights, *inputs) == module(*inputs)``."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    weights: list[torch.Tensor] = []
    lifted: dict[str, torch.fx.Node] = {}
    nodes = list(module.graph.nodes)
    for node in nodes:
        if node.op == "get_attr" and node.target not in lifted:
            lifted[node.target] = graph.placeholder(f"w_{len(weights)}")
            value = module
            for part in node.target.split("."):
                value = getattr(value, part)
            weights.append(value)
    for node in nodes:
        env[node] = lifted[node.target] if node.op == "get_attr" else graph.node_copy(node, lambda n: env[n])
    return torch.fx.GraphModule(torch.nn.Module(), graph, class_name="LiteLifted"), weights


class Graphed:
    """A compiled package replayed from a CUDA graph: inputs copied into static buffers."""

    def __init__(self, compiled: Callable, example: tuple[torch.Tensor, ...]) -> None:
        self.inputs = [torch.empty_like(a) for a in example]
        for buffer, value in zip(self.inputs, example):
            buffer.copy_(value)
        stream = torch.cuda.Stream(device=example[0].device)
        stream.wait_stream(torch.cuda.current_stream(example[0].device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up outside the capture (lazy initialisation, workspaces)
                compiled(*self.inputs)
        torch.cuda.current_stream(example[0].device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = compiled(*self.inputs)

    def __call__(self, *args: torch.Tensor):
        for buffer, value in zip(self.inputs, args):
            buffer.copy_(value)
        self.graph.replay()
        return self.outputs


def device_arch(args: tuple[torch.Tensor, ...]) -> str:
    return gpu_arch(args[0].device if args else torch.device("cpu"))


def gpu_arch(device: torch.device | None = None) -> str:
    """The GPU architecture as Triton and nvcc name it (``sm_90``); ``cpu`` without CUDA."""
    if device is not None and device.type != "cuda":
        return "cpu"
    if not torch.cuda.is_available():
        return "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"
