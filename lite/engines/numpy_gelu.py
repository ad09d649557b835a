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

import math
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


# -- the exact (erf) GELU node ------------------------------------------------------------------


def fuse_erf_gelu(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each ``Gelu`` node (approximate "none") computed by :class:`TableGelu`."""
    del constants, graph_outputs  # one node for one node: nothing else to check
    fused = []
    for step in steps:
        if (step.node.op_type == "Gelu" and plain(step, 1) and not step.custom
                and step.attributes.get("approximate", "none") == "none"):
            step = replace(step, fn=TableGelu(step.fn), attributes={}, output_count=None, activation=None,
                           kernel_applies_activation=False, wants_allocate=True, prepare=None, prepared=None)
        fused.append(step)
    return fused


# Nodes per unit of x, and the largest |x| tabled: Phi(-10) = 7.6e-24, so the tails beyond are
# Phi = 0 and Phi = 1 (gelu(x) = 0 and x, to well under a float32 ulp of anything summed with them).
_PER_UNIT = 1024
_LIMIT = 10
_TABLES: list[np.ndarray] = []  # Phi at the nodes, and its derivative times the spacing; on first use


def _tables() -> list[np.ndarray]:
    """Phi(k/1024) and Phi'(k/1024)/1024 for k in [-10240, 10240], stored at index k (negative
    k from the end, numpy's negative indexing), in float32; computed in float64 with math.erfc."""
    if not _TABLES:
        count = _PER_UNIT * _LIMIT
        nodes = np.arange(-count, count + 1, dtype=np.float64) / _PER_UNIT
        phi = np.array([0.5 * math.erfc(-value / math.sqrt(2)) for value in nodes.tolist()])
        slope = np.exp(-0.5 * nodes * nodes) / (math.sqrt(2 * math.pi) * _PER_UNIT)
        phi[0], slope[0], phi[-1], slope[-1] = 0.0, 0.0, 1.0, 0.0
        order = np.arange(-count, count + 1)
        for column in (phi, slope):
            table = np.empty(column.size, np.float32)
            table[order] = column
            table.flags.writeable = False
            _TABLES.append(table)
    return _TABLES


class TableGelu:
    """``x·Phi(x)`` for float32 ``x``, Phi (the normal CDF, ``(1 + erf(x/√2))/2``) from a table:
    the value at the nearest of the nodes 1/1024 apart plus the offset times the derivative there.
    That is eleven numpy calls where the erfc fit of the Gelu kernel is sixteen and a
    ten-row product: half its time on the 2k-25k-element activations of the zoo's small vision
    transformers (SwiftFormer, FocalNet, PoolFormer), a third of FocalNet's run. The linear step's
    error is below (1/2048)²/2·|Phi''|: relative to gelu(x), 2e-7 for x > -1 and 4.4e-6 at x = -6
    (the erfc fit's there: 2.7e-6) and 7.6e-6 at x = -8, measured against math.erfc in float64. NaN stays NaN; -inf
    gives NaN, as ``x·Phi(x)`` does in IEEE arithmetic. Other dtypes take the Gelu kernel.

    The nearest node comes from float32 rounding itself: for ``|u| <= 10240``, ``u + 1.5·2^23``
    lies in [2^23, 2^24), where float32 steps by exactly 1, so the sum is ``rint(u) + 1.5·2^23``
    exactly and its bit pattern, read as int32, is the bits of 1.5·2^23 plus ``rint(u)``: the
    table index without a rounding call or a float-to-int conversion, and one clip for the two
    clamps. The temporaries come from ``allocate``: on fresh ones the activations of Swin,
    ConvNeXt, FocalNet and PoolFormer page-faulted every run (100-900 faults, a tenth of their
    time). A NaN's bit pattern indexes far outside the table (IndexError); such inputs, and
    small ones, take the two-clamp path below, which maps NaN to a node."""

    def __init__(self, kernel: Callable) -> None:
        self.kernel = kernel
        self.phi, self.slope = _tables()

    def __call__(self, x: Any, allocate: Callable = np.empty) -> Any:
        if type(x) is not np.ndarray or x.dtype != np.float32 or x.ndim == 0:
            return self.kernel(x, allocate=allocate)
        if not x.flags.c_contiguous:
            from lite.ops._layout import channels_first_order, channels_last_order, is_channels_last

            if not is_channels_last(x):
                return self.kernel(x, allocate=allocate)
            # A convolution's channels-last output: computed in its memory order, handed on so.
            order = channels_last_order(x.ndim)
            return self(x.transpose(order), allocate).transpose(channels_first_order(x.ndim))
        if x.size < _BIT_INDEX_MIN_SIZE:
            return self._two_clamps(x)
        # The index (8 bytes an element) and u (4) in one request: each costs the arena a few µs.
        scratch = allocate((3 * x.size,), np.float32)
        index = scratch[:2 * x.size].view(np.intp).reshape(x.shape)
        u = scratch[2 * x.size:].reshape(x.shape)
        y = allocate(x.shape, np.float32)  # the rounded nodes first, then the result
        np.multiply(x, _NODES, out=u)
        np.clip(u, _LOW, _HIGH, out=u)  # NaN stays NaN (and indexes outside the table)
        np.add(u, _ROUNDER, out=y)
        np.subtract(y.view(np.int32), _INDEX_SHIFT, out=index)
        try:
            slope = self.slope[index]
        except IndexError:  # a NaN in x
            return self._two_clamps(x)
        np.subtract(y, _ROUNDER, out=y)
        np.subtract(u, y, out=u)
        np.multiply(slope, u, out=y)
        np.add(y, self.phi[index], out=y)
        with np.errstate(invalid="ignore"):  # -inf · Phi(-inf) = -inf · 0: NaN, as ONNX Runtime gives, unwarned
            return np.multiply(y, x, out=y)

    def _two_clamps(self, x: np.ndarray) -> np.ndarray:
        """The same values for a small ``x`` or one with NaN in it: clamped with fmax/fmin, which map NaN to
        the lowest node (Phi = 0), and ``x·0`` gives the NaN back."""
        u = np.multiply(x, _NODES)
        np.fmax(u, _LOW, out=u)
        np.fmin(u, _HIGH, out=u)
        nearest = np.rint(u)
        index = nearest.astype(np.intp)
        np.subtract(u, nearest, out=u)
        y = self.slope[index]
        y *= u
        y += self.phi[index]
        with np.errstate(invalid="ignore"):
            return np.multiply(y, x, out=y)


_NODES = np.float32(_PER_UNIT)
_LOW, _HIGH = np.float32(-_PER_UNIT * _LIMIT), np.float32(_PER_UNIT * _LIMIT)
_ROUNDER = np.float32(1.5 * 2**23)
# rint(u) is the sum's bits less the rounder's (a node index, negative ones from the table's end).
_INDEX_SHIFT = np.int32(int(_ROUNDER.view(np.int32)))
# Below this many elements (48 KiB) the two-clamp path's fresh temporaries stay in the C allocator's
# reused memory, and its fewer arena requests make it faster (6k-element activations: 10%); from
# 12k up (ConvNeXt's, FocalNet's, PoolFormer's 12k-25k) they page-faulted every run.
_BIT_INDEX_MIN_SIZE = 12288
