"""The numpy engine's L2 normalization fusion: torch's ``F.normalize`` over the last axis (SwinV2's
cosine attention, SwiftFormer), written by torch.export as ReduceL2, Clip, [Expand] and Div, as
one step. See :func:`fuse_l2_normalize`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, Graph, broadcasts_to, ones, plain, run_steps

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_l2_normalize(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every ``x / max(‖x‖₂, ε)`` over the last axis (torch's F.normalize: SwinV2's
    cosine attention, SwiftFormer) replaced by one step. torch.export writes it as::

        x ─┬─► ReduceL2(last axis, keepdims) ─► Clip(ε) ─► [Expand] ─┐
           └──────────────────────────────────────────────────────────┴─► Div ─► y

    The fused step computes the norm as the ReduceL2 kernel does over the last axis of a
    C-contiguous input (squares, row sums as a product with ones, square root; for a strided
    input one einsum, the sum in another order, a rounding apart), clips it with the Clip node's own
    kernel or, for a lower bound alone, ``np.maximum`` (the same values), and divides x by it broadcast: the values the Expand would copy out, not a copy.
    Inputs it does not handle run the original kernels one after the other.
    """
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for norm in steps:
        if norm.node.op_type != "ReduceL2" or not plain(norm, len(norm.inputs)) or not norm.inputs:
            continue
        match = match_l2_normalize(norm, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match.block):
            continue
        last = match.block[-1]
        fused[id(last)] = replace(
            last, fn=match, inputs=[match.x] + match.extra, outputs=[last.outputs[0]],
            attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
            wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
        dropped.update(id(s) for s in match.block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def match_l2_normalize(norm: _Step, graph: Graph, constants: dict[int, Any]) -> FusedL2Normalize | None:
    """The :class:`FusedL2Normalize` starting at ``norm`` (a ReduceL2), or None."""
    x = norm.inputs[0]
    axes = constants.get(norm.inputs[1]) if len(norm.inputs) == 2 else norm.attributes.get("axes")
    if (len(norm.inputs) > 2 or axes is None or np.asarray(axes).size != 1 or norm.attributes.get("keepdims", 1) != 1
            or x in constants):
        return None
    clip = graph.only_reader(norm.outputs[0], "Clip", None, None)
    if clip is None or any(index not in constants for index in clip.inputs[1:]):
        return None
    block, current, extra = [norm, clip], clip.outputs[0], []
    expand = graph.only_reader(current, "Expand", 2, None)
    if expand is not None:
        block.append(expand)
        extra.append(expand.inputs[1])
        current = expand.outputs[0]
    divide = graph.only_reader(current, "Div", 2, None, first=False)
    if divide is None or divide.inputs != [x, current]:
        return None
    block.append(divide)
    block.sort(key=lambda step: graph.position[id(step)])
    if block[-1] is not divide:
        return None
    return FusedL2Normalize(block, x, int(np.asarray(axes).reshape(())), clip, extra, constants)


class FusedL2Normalize:
    """The fused step's kernel (see fuse_l2_normalize)."""

    def __init__(self, block: list[_Step], x: int, axis: int, clip: _Step, extra: list[int],
                 constants: dict[int, Any]) -> None:
        self.block = block
        self.x = x
        self.axis = axis
        self.clip = clip.fn
        self.clip_arguments = [constants[index] for index in clip.inputs[1:]]
        self.clip_keywords = clip.keywords
        # A Clip by a lower bound alone (F.normalize's ε) is a maximum: one ufunc call, not the
        # Clip kernel's checks (7 µs of a 16 µs step on SwiftFormer's 256x24 queries).
        floor = self.clip_arguments[0] if len(self.clip_arguments) == 1 and not clip.keywords else None
        self.floor = floor if isinstance(floor, np.ndarray) and floor.shape == () and floor.dtype in FLOATS else None
        self.extra = extra
        self.constants = constants

    def __call__(self, x: Any, *shape: Any, allocate: Callable = np.empty) -> Any:
        if (type(x) is not np.ndarray or x.dtype not in FLOATS or not x.ndim or not x.size
                or self.axis not in (-1, x.ndim - 1)
                or (shape and not (type(shape[0]) is np.ndarray and shape[0].ndim == 1
                                   and broadcasts_to(tuple(shape[0].tolist()), x.shape)))):
            return self._in_turn(x, shape, allocate)
        if x.ndim > 1 and not x.flags.c_contiguous:
            # A column block of a wider product (SwiftFormer's queries and keys): one einsum
            # squares and sums the strided rows where the product with ones needed a copy.
            norm = np.einsum("...i,...i->...", x, x)
            norm = np.sqrt(norm, out=norm).reshape(x.shape[:-1] + (1,))
        else:
            length = x.shape[-1]
            square = np.multiply(x, x)
            total = np.matmul(square.reshape(-1, length), ones(length, x.dtype))
            norm = np.sqrt(total).reshape(x.shape[:-1] + (1,))
        if self.floor is not None and self.floor.dtype == x.dtype:
            clipped = np.maximum(norm, self.floor, out=norm)  # NaN stays NaN, as Clip leaves it
        else:
            clipped = self.clip(norm, *self.clip_arguments, **self.clip_keywords)
        if type(clipped) is not np.ndarray or clipped.dtype != x.dtype:
            return self._in_turn(x, shape, allocate)
        return np.divide(x, clipped)

    def _in_turn(self, x: Any, shape: tuple[Any, ...], allocate: Callable) -> Any:
        return run_steps(self.block, {self.x: x, **dict(zip(self.extra, shape))}, self.constants, allocate)
