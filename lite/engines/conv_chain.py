"""The numpy engine's convolution chains: convolutions that feed only each other, and the residual
Add that may end them, run as one step (applied by :func:`lite.engines.conv_fusions.fuse`).

A MobileNet is chains of convolutions, each output read once, by the next one; an inverted
residual block (MobileNetV2/V3, EfficientNet, GhostNet) ends with a 1x1 projection summed with
the block's input::

    x ─► Conv 1x1 ─► Conv 3x3 dw ─► Conv 1x1 ─► Add(·, x) ─► y      becomes      x ─► chain(x) ─► y

On a 64x64 model's small maps (4x4, 2x2: a few thousand values) a convolution is a handful of
numpy calls of one or two µs, and the run loop's turn for each step (gathering its arguments,
the call, storing and releasing its values) is a sizeable part of it; the residual Add is one
numpy call, but as a step it also costs its kernel's entry and a new output array. As one step
the convolutions run one after the other (each bound to its prepared weights, as the engine
would run it), and the residual is added in place into the last one's fresh output:
``y = conv(...) + x``, the addition the Add did (``conv + x`` and ``x + conv`` are equal in
floating point), so the result is bit for bit the same.

On a batch-1 image, runs of two or more pointwise and depthwise convolutions on small maps go
further: one :class:`lite.ops._separable_chain.SeparableChain` per run, planned per input shape,
whose stages write straight into each other's buffers (the same products, summed by BLAS and
einsum in their own order: equal to float rounding, not bit for bit).

The fused step takes the place of the chain's last step (every input is computed by then).
A squeeze-and-excitation block fused into one step (lite.ops._squeeze_excite) joins a chain as a
convolution does: MobileNetV3's and EfficientNet's blocks are then one step each.

A convolution joins a chain where its output is read by the next convolution alone (as its
data input) and is not returned; the Add joins where it carries no activation and its other
operand is computed (not a constant bias).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import Graph, is_kernel, plain
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_conv_chains(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each chain of two or more convolutions, or of one or more and a residual
    Add, as one step."""
    graph = Graph(steps, graph_outputs)
    bound = {id(step): conv for step in steps if (conv := _bound(step)) is not None}
    following: dict[int, _Step] = {}  # id(conv step) -> the conv step that alone reads its output
    for step in steps:
        if id(step) in bound:
            reader = _only_reader(graph, step.outputs[0])
            if reader is not None and id(reader) in bound and reader.inputs[0] == step.outputs[0]:
                following[id(step)] = reader
    followed = {id(step) for step in following.values()}
    replaced: dict[int, _Step] = {}  # id(last step of a chain) -> the fused step
    dropped: set[int] = set()
    for step in steps:
        if id(step) not in bound or id(step) in followed:
            continue
        chain = [step]
        while id(chain[-1]) in following:
            chain.append(following[id(chain[-1])])
        residual = _residual_add(graph, chain[-1], constants)
        if residual is not None and id(residual[0]) in replaced:
            residual = None  # the Add of two convolutions' outputs ends the other's chain
        if len(chain) < 2 and residual is None:
            continue
        last = chain[-1] if residual is None else residual[0]
        replaced[id(last)] = _fused_step(chain, [bound[id(conv)] for conv in chain], residual)
        dropped.update(id(conv) for conv in chain)
        dropped.discard(id(last))
    if not replaced:
        return steps
    return [replaced.get(id(step), step) for step in steps if id(step) not in dropped]


def _bound(step: _Step) -> Callable | None:
    """The Conv step's kernel bound to its prepared weights and attributes (see
    lite.ops.conv.PreparedConv.bind), a squeeze-and-excitation step's block (see
    lite.engines.numpy_fusions), or None where the step cannot join a chain."""
    if step.node.op_type == "Mul" and type(step.fn).__name__ == "SqueezeExcite":
        usable = (step.inline and step.memo is None and not step.custom and step.wants_allocate
                  and step.activation is None and len(step.inputs) == 1 and step.output_count is None)
        return step.fn if usable else None
    if (step.node.op_type != "Conv" or step.node.domain or not is_kernel(step.fn, "conv", "Conv")
            or not step.inline or step.memo is not None or step.custom or not step.wants_allocate
            or step.output_count is not None):
        return None
    bind = getattr(step.prepared, "bind", None)
    if bind is None:
        return None
    return bind(dict(step.attributes), step.activation if step.kernel_applies_activation else None)


def _only_reader(graph: Graph, index: int) -> _Step | None:
    readers = graph.readers_of.get(index, [])
    if len(readers) != 1 or index in graph.graph_outputs or readers[0].inputs.count(index) != 1:
        return None
    return readers[0]


def _residual_add(graph: Graph, conv: _Step, constants: dict[int, Any]) -> tuple[_Step, int, bool] | None:
    """The plain Add that alone reads ``conv``'s output with a computed value, as (the Add,
    that value's index, whether the convolution is the first operand), or None."""
    add = _only_reader(graph, conv.outputs[0])
    if add is None or add.node.op_type != "Add" or not plain(add, 2):
        return None
    position = add.inputs.index(conv.outputs[0])
    other = add.inputs[1 - position]
    if other in constants:
        return None
    return add, other, position == 0


def _fused_step(chain: list[_Step], convs: list[Callable], residual: tuple[_Step, int, bool] | None) -> _Step:
    first, last = chain[0], chain[-1]
    if residual is None:
        return replace(last, fn=_ConvChain(convs, None), inputs=[first.inputs[0]], attributes={},
                       output_count=None, activation=None, kernel_applies_activation=False, wants_allocate=True,
                       prepare=None, prepared=None, memo=None, memo_sources=[], release=[])
    add, other, conv_first = residual
    return replace(add, fn=_ConvChain(convs, _Residual(add, conv_first)), inputs=[first.inputs[0], other],
                   attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
                   wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[], release=[])


class _Residual:
    """The chain's final Add: in place into the last convolution's fresh output, or the Add's own
    kernel where the operands differ in shape or type (broadcasting, its errors)."""

    def __init__(self, add: _Step, conv_first: bool) -> None:
        self.add = add.fn
        self.keywords = add.keywords
        self.allocates = add.wants_allocate
        self.conv_first = conv_first

    def __call__(self, y: Any, residual: Any, allocate: Callable) -> Any:
        if (type(y) is np.ndarray and type(residual) is np.ndarray and y.shape == residual.shape
                and y.dtype == residual.dtype and y.flags.writeable):
            return np.add(y, residual, out=y)
        operands = (y, residual) if self.conv_first else (residual, y)
        if self.allocates:
            return self.add(*operands, allocate=allocate, **self.keywords)
        return self.add(*operands, **self.keywords)


class _ConvChain:
    """The chain's convolutions in turn on ``x``, then its residual Add if it has one.

    Per input shape and type, runs of two or more pointwise and depthwise convolutions on small
    maps are one :class:`lite.ops._separable_chain.SeparableChain` (planned on the first call,
    from the shapes the convolutions saw)."""

    def __init__(self, convs: list[Callable], residual: _Residual | None) -> None:
        self.convs = convs
        self.residual = residual
        self.plans: PlanCache[list[Callable]] = PlanCache()

    def __call__(self, x: Any, *residual: Any, allocate: Callable) -> Any:
        plan = self.plans.get((x.shape, x.dtype)) if type(x) is np.ndarray else self.convs
        if plan is None:
            plan = self._plan(x)
        for conv in plan:
            x = conv(x, allocate=allocate)
        if self.residual is None:
            return x
        return self.residual(x, residual[0], allocate)

    def _plan(self, x: np.ndarray) -> list[Callable]:
        """The chain for inputs like ``x``: each run of two or more convolutions that are
        stages (see lite.ops._separable_chain.stage) as one SeparableChain. Planned from the
        shapes alone, so that every call with this shape computes the same way."""
        # Imported here: a model without convolution chains loads no convolution kernels.
        from lite.ops import _separable_chain as separable_chain
        from lite.ops._squeeze_excite import SqueezeExcite

        stages = []
        shape = x.shape
        for conv in self.convs:
            prepared = getattr(conv, "prepared", None)
            if type(conv) is SqueezeExcite and shape is not None:
                stages.append(separable_chain.squeeze_stage(conv, shape, x.dtype))  # the shape stays
                continue
            if prepared is None or shape is None:
                stages.append(None)
                shape = None  # the shapes past here are unknown: nothing more is fused
                continue
            stages.append(separable_chain.stage(prepared.weights, prepared.bias, conv.attributes, conv.activation,
                                                shape, x.dtype))
            shape = separable_chain.output_shape_of(prepared.weights, conv.attributes, shape)
        plan: list[Callable] = []
        run: list[tuple[Callable, Any]] = []
        for conv, stage in [*zip(self.convs, stages), (None, None)]:
            if stage is not None:
                run.append((conv, stage))
                continue
            if len(run) > 1:
                plan.append(separable_chain.SeparableChain([s for _, s in run], run[0][1].dtype))
            else:
                plan.extend(c for c, _ in run)
            run = []
            if conv is not None:
                plan.append(conv)
        return self.plans.put((x.shape, x.dtype), plan)

