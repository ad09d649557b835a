"""The numpy engine's tanh-GELU fusion: GPT-2's ``gelu_new`` written as elementwise nodes, as one step.

torch.export writes ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` as eight nodes::

    x ─┬─► Mul(½) ───────────────────────────────────────────────────────────────┐
       ├─► Pow(3) ─► Mul(a) ─┐                                                    ├─► Mul ─► y
       └─────────────────────┴─► Add ─► Mul(k) ─► Tanh ─► Add(1) ─────────────────┘

The fused step computes the same products and sums with the graph's own constants (a, k, ½
and 1 are read from it, not assumed), the cube as the Pow kernel computes it (x·x·x), the
intermediates written into one buffer. Every node but the last is read by the next alone; the
constants are scalars of x's float type (other inputs run the original kernels in turn).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, Graph, plain, run_in_turn

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_tanh_gelu(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every tanh-approximated GELU (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "Tanh" or not plain(step, 1):
            continue
        match = match_tanh_gelu(step, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match.block):
            continue
        last = match.block[-1]
        fused[id(last)] = replace(
            last, fn=match, inputs=[match.x], outputs=[last.outputs[0]], attributes={}, output_count=None,
            activation=None, kernel_applies_activation=False, wants_allocate=True, prepare=None, prepared=None,
            memo=None, memo_sources=[])
        dropped.update(id(s) for s in match.block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _by_constant(step: _Step | None, op_type: str, constants: dict[int, Any]) -> tuple[int, np.ndarray] | None:
    """(the other input, the constant) of an ``op_type`` step by a scalar float constant."""
    if step is None or step.node.op_type != op_type or not plain(step, 2):
        return None
    for position in (1, 0):
        value = constants.get(step.inputs[position])
        if (isinstance(value, np.ndarray) and value.size == 1 and value.dtype in FLOATS
                and step.inputs[1 - position] not in constants):
            return step.inputs[1 - position], value
    return None


def match_tanh_gelu(tanh: _Step, graph: Graph, constants: dict[int, Any]) -> FusedTanhGelu | None:
    """The :class:`FusedTanhGelu` around ``tanh``, or None."""
    inner = graph.producer(tanh.inputs[0], "Mul", 2)
    scaled = _by_constant(inner, "Mul", constants)
    total = graph.producer(scaled[0], "Add", 2) if scaled is not None else None
    if total is None or total.inputs[0] == total.inputs[1]:
        return None
    for position in (0, 1):
        x, cubic = total.inputs[position], graph.producer(total.inputs[1 - position], "Mul", 2)
        weighted = _by_constant(cubic, "Mul", constants)
        power = graph.producer(weighted[0], "Pow", 2) if weighted is not None else None
        exponent = constants.get(power.inputs[1]) if power is not None else None
        if (power is not None and power.inputs[0] == x and isinstance(exponent, np.ndarray) and exponent.size == 1
                and float(exponent.reshape(())) == 3.0):
            break
    else:
        return None
    plus_one = graph.only_reader(tanh.outputs[0], "Add", 2, None, first=False)
    one = _by_constant(plus_one, "Add", constants)
    gate = graph.only_reader(plus_one.outputs[0], "Mul", 2, None, first=False) if one is not None else None
    if gate is None:
        return None
    halved = graph.producer(gate.inputs[0] if gate.inputs[1] == plus_one.outputs[0] else gate.inputs[1], "Mul", 2)
    half = _by_constant(halved, "Mul", constants)
    if half is None or half[0] != x:
        return None
    block = [halved, power, cubic, total, inner, tanh, plus_one, gate]
    values = [half[1], weighted[1], scaled[1], one[1]]
    if len({value.dtype for value in values}) != 1:
        return None
    block.sort(key=lambda step: graph.position[id(step)])
    if block[-1] is not gate:
        return None
    return FusedTanhGelu(block, x, *values, constants)


class FusedTanhGelu:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], x: int, half: np.ndarray, cubic: np.ndarray, inner: np.ndarray,
                 one: np.ndarray, constants: dict[int, Any]) -> None:
        self.block = block
        self.x = x
        self.half, self.cubic, self.inner, self.one = half, cubic, inner, one
        self.dtype = half.dtype
        self.rank = max(value.ndim for value in (half, cubic, inner, one))
        self.constants = constants

    def __call__(self, x: Any, allocate: Callable = np.empty) -> Any:
        if type(x) is not np.ndarray or x.dtype != self.dtype or x.ndim < self.rank:
            return run_in_turn(self.block, self.x, x, self.constants, allocate)
        y = np.multiply(x, self.half)
        gate = np.multiply(np.multiply(x, x), x)
        np.multiply(gate, self.cubic, out=gate)
        np.add(x, gate, out=gate)
        np.multiply(gate, self.inner, out=gate)
        np.tanh(gate, out=gate)
        np.add(gate, self.one, out=gate)
        return np.multiply(y, gate, out=y)
