"""Recording ops as ONNX-style nodes while a forward pass runs (used by ``train.export``).

Every op in :mod:`train.ops` calls :func:`record` with its ONNX op type, inputs, output and
attributes. Outside an export nothing is recorded and the call costs one global lookup.
This module holds plain Python data only; turning it into an ONNX model (and importing
onnx) is the exporter's business.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class TracedNode:
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]


@dataclass
class Tracer:
    """Names every tensor met during one forward pass and collects the nodes producing them."""

    nodes: list[TracedNode] = field(default_factory=list)
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    parameters: set[str] = field(default_factory=set)  # initializers that are Parameters
    names: dict[int, str] = field(default_factory=dict)
    # keeps every named object alive so that its id() cannot be reused during the trace
    keep: list[Any] = field(default_factory=list)
    counter: int = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}_{self.counter}"

    def bind(self, value: Any, name: str) -> None:
        self.names[id(value)] = name
        self.keep.append(value)

    def name_of(self, value: Any) -> str:
        """The graph name of an op input: a traced tensor, a parameter or a constant."""
        known = self.names.get(id(value))
        if known is not None:
            return known
        from train.tensor import Parameter, Tensor

        if isinstance(value, Parameter):
            name = value.name
            self.initializers[name] = np.ascontiguousarray(value.data)
            self.parameters.add(name)
        else:
            data = value.data if isinstance(value, Tensor) else np.asarray(value)
            name = self.fresh("const")
            self.initializers[name] = np.ascontiguousarray(data)
        self.bind(value, name)
        return name

    def constant(self, data: np.ndarray) -> str:
        name = self.fresh("const")
        self.initializers[name] = np.ascontiguousarray(data)
        return name

    def emit(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        output = self.fresh(op_type.lower())
        self.nodes.append(TracedNode(op_type, list(inputs), [output], attrs))
        return output


_current: list[Tracer] = []


def active() -> Tracer | None:
    return _current[-1] if _current else None


@contextlib.contextmanager
def tracing() -> Iterator[Tracer]:
    tracer = Tracer()
    _current.append(tracer)
    try:
        yield tracer
    finally:
        _current.pop()


def record(op_type: str, inputs: Sequence[Any], output: Any, **attrs: Any) -> None:
    """Record ``output = op_type(*inputs, **attrs)`` when an export trace is running."""
    if not _current:
        return
    tracer = _current[-1]
    names = [tracer.name_of(v) if v is not None else "" for v in inputs]
    node_output = tracer.emit(op_type, names, **attrs)
    tracer.bind(output, node_output)
