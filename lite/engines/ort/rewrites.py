"""Rewrites of a lowered model into the forms ONNX Runtime's CPU optimizer fuses.

The converter writes some layers in forms the numpy engine runs best; ONNX Runtime fuses the
original forms better. Each rule here is *pattern → check → rewrite*: the check returns the
reason it declines (None when it applies), and a rule never changes what the graph computes.

scale_shift_as_batchnorm
    The converter turns a BatchNormalization with no layer to fold into (after a Concat, a pool,
    a residual branch) into ``Mul(x, s) → Add(t)`` with ``s``, ``t`` broadcasting over axis 1
    (``converter.passes.batchnorm``). That is the same affine map per channel ``c`` as::

        BatchNormalization(x, scale=s, B=t, mean=0, var=1, epsilon=0)
            = s[c] · (x − 0) / sqrt(1 + 0) + t[c] = s[c] · x + t[c]

    and ONNX Runtime's NCHWc layout turns a BatchNormalization into a depthwise convolution it
    fuses with the activation after it, where Mul and Add each need the tensor back in NCHW
    (DenseNet: 8 layout reorders and 16 element-wise passes fewer)::

        x ──Mul(s)──Add(t)──►        becomes        x ──BatchNormalization(s, t, 0, 1)──►

    Declines: a Mul output read elsewhere or returned, operands that are not float32 constants,
    an unknown rank, constants that do not broadcast along axis 1 only.

shift_as_batchnorm
    The same for a shift alone, ``Add(x, t)`` of an image (rank 4) with ``t`` per channel: what is
    left of such a BatchNormalization once the converter moved its scale into the next layer
    (``converter.passes.scale_through_relu``): ``BatchNormalization(x, 1, t, 0, 1)``. Declines,
    besides the above: an Add after a Conv, MatMul or Gemm (ONNX Runtime adds it to that layer's
    bias itself), a tensor of another rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.format.ir import fresh_name
from lite.format.onnx.lower import Lowered


@dataclass
class _Graph:
    """Lookups over the main graph of a lowered model, kept current by the rules."""

    lowered: Lowered
    graph: onnx.GraphProto = field(init=False)
    initializers: dict[str, TensorProto] = field(init=False)
    readers: dict[str, list[onnx.NodeProto]] = field(init=False)
    producers: dict[str, onnx.NodeProto] = field(init=False)
    ranks: dict[str, int] = field(init=False)
    taken: set[str] = field(init=False)
    outputs: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.graph = self.lowered.model.graph
        self.initializers = {init.name: init for init in self.graph.initializer}
        self.readers = {}
        self.producers = {}
        for node in self.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
            for name in node.output:
                self.producers[name] = node
        self.ranks = {}
        for value in (*self.graph.input, *self.graph.value_info, *self.graph.output):
            tensor_type = value.type.tensor_type if value.type.HasField("tensor_type") else None
            if tensor_type is not None and tensor_type.HasField("shape"):
                self.ranks[value.name] = len(tensor_type.shape.dim)
        self.taken = set(self.initializers) | {v.name for v in (*self.graph.input, *self.graph.output)}
        self.taken |= {name for node in self.graph.node for name in (*node.input, *node.output, node.name)}
        self.outputs = {value.name for value in self.graph.output}

    def constant(self, name: str) -> np.ndarray | None:
        """The value of an initializer (None for anything else)."""
        proto = self.initializers.get(name)
        if proto is None:
            return None
        if name in self.lowered.external:
            return self.lowered.external[name]
        return numpy_helper.to_array(proto)

    def add_constant(self, base: str, array: np.ndarray) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        proto = numpy_helper.from_array(array, name)
        self.graph.initializer.append(proto)
        self.initializers[name] = proto
        return name

    def drop_unread_constants(self, names: list[str]) -> None:
        read = {name for node in self.graph.node for name in node.input}
        for name in names:
            if name in read or name not in self.initializers:
                continue
            self.graph.initializer.remove(self.initializers.pop(name))
            self.lowered.external.pop(name, None)


def _float_constant(graph: _Graph, name: str) -> np.ndarray | None:
    array = graph.constant(name)
    return array if array is not None and array.dtype == np.float32 else None


def _per_channel(array: np.ndarray, rank: int) -> np.ndarray | None:
    """``array`` as (C,) values along axis 1 of a rank-``rank`` tensor, or None if it varies elsewhere."""
    if array.ndim > rank:
        return None
    aligned = (1,) * (rank - array.ndim) + array.shape
    if any(size != 1 for axis, size in enumerate(aligned) if axis != 1):
        return None
    return array.reshape(-1)


@dataclass
class _ScaleShift:
    mul: onnx.NodeProto
    add: onnx.NodeProto
    x: str
    scale: str
    shift: str


def _match_scale_shift(graph: _Graph, node: onnx.NodeProto) -> _ScaleShift | None:
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    readers = graph.readers.get(node.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "Add" or readers[0].domain not in ("", "ai.onnx"):
        return None
    add = readers[0]
    if len(add.input) != 2 or node.output[0] in graph.outputs:
        return None
    x, scale = node.input if node.input[1] in graph.initializers else node.input[::-1]
    shift = add.input[1] if add.input[0] == node.output[0] else add.input[0]
    return _ScaleShift(node, add, x, scale, shift)


def _check_scale_shift(graph: _Graph, match: _ScaleShift) -> str | None:
    """None when the pair is a BatchNormalization, else why not."""
    if match.x in graph.initializers:
        return "both operands of the Mul are constants"
    scale, shift = _float_constant(graph, match.scale), _float_constant(graph, match.shift)
    if scale is None or shift is None:
        return "the scale or the shift is not a float32 constant"
    rank = graph.ranks.get(match.x)
    if rank is None or rank < 2:
        return f"the rank of {match.x!r} is unknown or below 2"
    s, t = _per_channel(scale, rank), _per_channel(shift, rank)
    if s is None or t is None:
        return "the scale or the shift varies along an axis other than 1"
    if s.size != t.size and 1 not in (s.size, t.size):
        return f"scale and shift have {s.size} and {t.size} channels"
    if max(s.size, t.size) == 1:
        return "one scale for every channel: there is no channel count to give BatchNormalization"
    return None


def _rewrite_scale_shift(graph: _Graph, match: _ScaleShift) -> None:
    s = _per_channel(graph.constant(match.scale), graph.ranks[match.x])
    t = _per_channel(graph.constant(match.shift), graph.ranks[match.x])
    channels = max(s.size, t.size)
    s = np.ascontiguousarray(np.broadcast_to(s, (channels,)), dtype=np.float32)
    t = np.ascontiguousarray(np.broadcast_to(t, (channels,)), dtype=np.float32)
    base = match.add.name or match.add.output[0]
    inputs = [match.x, graph.add_constant(f"{base}/scale", s), graph.add_constant(f"{base}/bias", t),
              graph.add_constant(f"{base}/mean", np.zeros(channels, np.float32)),
              graph.add_constant(f"{base}/var", np.ones(channels, np.float32))]
    batchnorm = helper.make_node("BatchNormalization", inputs, [match.add.output[0]], name=base, epsilon=0.0)
    nodes = graph.graph.node
    position = list(nodes).index(match.mul)
    nodes.remove(match.add)
    nodes.remove(match.mul)
    nodes.insert(position, batchnorm)
    graph.readers[match.x] = [batchnorm if n == match.mul else n for n in graph.readers.get(match.x, [])]
    graph.drop_unread_constants([match.scale, match.shift])


@dataclass
class _Shift:
    add: onnx.NodeProto
    x: str
    shift: str


_BIASED = {"Conv", "ConvTranspose", "MatMul", "Gemm"}  # ONNX Runtime folds an Add after these itself


def _match_shift(graph: _Graph, node: onnx.NodeProto) -> _Shift | None:
    if node.op_type != "Add" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    x, shift = node.input if node.input[1] in graph.initializers else node.input[::-1]
    return _Shift(node, x, shift)


def _check_shift(graph: _Graph, match: _Shift) -> str | None:
    if match.x in graph.initializers or match.shift not in graph.initializers:
        return "not an Add of a computed value and a constant"
    if graph.ranks.get(match.x) != 4:
        return f"{match.x!r} is not an image (rank 4)"
    producer = graph.producers.get(match.x)
    if producer is not None and producer.op_type in _BIASED:
        return f"after a {producer.op_type}, whose bias ONNX Runtime folds the Add into"
    shift = _float_constant(graph, match.shift)
    if shift is None:
        return "the shift is not a float32 constant"
    t = _per_channel(shift, 4)
    if t is None or t.size == 1:
        return "the shift is not one value per channel of axis 1"
    return None


def _rewrite_shift(graph: _Graph, match: _Shift) -> None:
    t = np.ascontiguousarray(_per_channel(graph.constant(match.shift), 4), dtype=np.float32)
    channels = t.size
    base = match.add.name or match.add.output[0]
    inputs = [match.x, graph.add_constant(f"{base}/scale", np.ones(channels, np.float32)),
              graph.add_constant(f"{base}/bias", t), graph.add_constant(f"{base}/mean", np.zeros(channels, np.float32)),
              graph.add_constant(f"{base}/var", np.ones(channels, np.float32))]
    batchnorm = helper.make_node("BatchNormalization", inputs, [match.add.output[0]], name=base, epsilon=0.0)
    nodes = graph.graph.node
    position = list(nodes).index(match.add)
    nodes.remove(match.add)
    nodes.insert(position, batchnorm)
    graph.readers[match.x] = [batchnorm if n == match.add else n for n in graph.readers.get(match.x, [])]
    graph.drop_unread_constants([match.shift])


@dataclass(frozen=True)
class Rule:
    name: str
    match: Callable[[_Graph, onnx.NodeProto], object | None]
    check: Callable[[_Graph, object], str | None]
    rewrite: Callable[[_Graph, object], None]


# The rules, in the order they run.
RULES = (
    Rule("scale_shift_as_batchnorm", _match_scale_shift, _check_scale_shift, _rewrite_scale_shift),
    Rule("shift_as_batchnorm", _match_shift, _check_shift, _rewrite_shift),
)


def apply(lowered: Lowered, rules: tuple[Rule, ...] = RULES) -> dict[str, int]:
    """Rewrite the main graph of ``lowered`` in place; returns how often each rule applied."""
    graph = _Graph(lowered)
    counts = {rule.name: 0 for rule in rules}
    for rule in rules:
        for node in list(graph.graph.node):
            match = rule.match(graph, node)
            if match is not None and rule.check(graph, match) is None:
                rule.rewrite(graph, match)
                counts[rule.name] += 1
    return counts


def declined(lowered: Lowered, rule: Rule) -> list[tuple[str, str]]:
    """(node name, reason) for every match of ``rule`` it declines to rewrite (for tests and diagnosis)."""
    graph = _Graph(lowered)
    reasons = []
    for node in graph.graph.node:
        match = rule.match(graph, node)
        if match is not None:
            reason = rule.check(graph, match)
            if reason is not None:
                reasons.append((node.name, reason))
    return reasons
