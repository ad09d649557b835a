"""The numpy engine's per-channel affine fusion (applied by :func:`lite.engines.numpy_fusions.fuse`).

A BatchNormalization the converter could not fold into a convolution (one that comes first in
a pre-activation block: DenseNet's BN-ReLU-Conv on every concatenation) is a Mul and an Add of
per-channel constants, usually followed by a Relu; three steps, each a kernel call and an
output array::

    x ─► Mul(s) ─► Add(t) ─► Relu ─► y        becomes        x ─► ChannelAffine(s, t, Relu) ─► y
    x ─► Add(t) ─► Relu ─► y                  becomes        x ─► ChannelAffine(-, t, Relu) ─► y

(the second where the converter moved the scale into the next convolution, leaving the shift).

:func:`fuse_channel_affine` makes them one step that computes the same operations in the same
order into one output (``y = x * s``, ``y += t``, ``y = max(y, 0)``: the same floats as the
nodes'). Inputs it does not handle (not an image of the constants' type with C channels) run
the original steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import Graph, in_turn, per_channel
from lite.ops import fused_activation
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def _match(mul: _Step, graph: Graph, constants: dict[int, Any]):
    """(x, scale, shift, steps, relu) of the block starting at ``mul``, or why there is none."""
    if len(mul.inputs) != 2:
        return "not a two-input Mul"
    for side in (0, 1):
        x, scale = mul.inputs[side], per_channel(constants.get(mul.inputs[1 - side]))
        if scale is not None and x >= 0 and x not in constants:
            break
    else:
        return "the Mul is not of a computed value by a per-channel constant"
    add = graph.only_reader(mul.outputs[0], "Add", 2, None, first=False)
    if add is None:
        return "the product's one reader is not an Add"
    shift = per_channel(constants.get(add.inputs[1 - add.inputs.index(mul.outputs[0])]))
    if shift is None or shift.shape != scale.shape or shift.dtype != scale.dtype:
        return "the Add is not of a per-channel constant of the scale's shape and type"
    relu = graph.only_reader(add.outputs[0], "Relu", 1, None)
    return x, scale, shift, [mul, add] + ([relu] if relu is not None else []), relu is not None


def _match_shift(add: _Step, graph: Graph, constants: dict[int, Any]):
    """(x, None, shift, steps, True) of an Add of a per-channel constant read by a Relu alone."""
    if len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return "not a two-input Add"
    for side in (0, 1):
        x, shift = add.inputs[side], per_channel(constants.get(add.inputs[1 - side]))
        if shift is not None and x >= 0 and x not in constants:
            break
    else:
        return "the Add is not of a computed value and a per-channel constant"
    relu = graph.only_reader(add.outputs[0], "Relu", 1, None)
    if relu is None:
        return "the sum's one reader is not a Relu (an Add alone is one step already)"
    return x, None, shift, [add, relu], True


def fuse_channel_affine(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """Every Mul and Add of per-channel constants (and the Relu after them) as one step, at the
    place of the last of them."""
    graph = Graph(steps, graph_outputs)
    replaced: dict[int, _Step] = {}
    dropped: set[int] = set()
    for mul in steps:
        if (mul.node.op_type not in ("Mul", "Add") or mul.node.domain or not mul.inline or mul.activation is not None
                or id(mul) in dropped or id(mul) in replaced):
            continue
        match = (_match if mul.node.op_type == "Mul" else _match_shift)(mul, graph, constants)
        if isinstance(match, str):
            continue
        x, scale, shift, block, relu = match
        kernel = ChannelAffine(scale, shift, relu, in_turn(block, x, constants))
        replaced[id(block[-1])] = replace(
            mul, fn=kernel, inputs=[x], outputs=block[-1].outputs, attributes={}, output_count=None,
            activation=None, kernel_applies_activation=False, wants_allocate=True, prepare=None, prepared=None,
            memo=None, memo_sources=[], release=[])
        dropped.update(id(step) for step in block[:-1])
    if not replaced:
        return steps
    return [replaced.get(id(step), step) for step in steps if id(step) not in dropped]


class ChannelAffine:
    """``y = x * scale + shift`` (``x + shift`` without a scale) per channel of an image, and an
    optional Relu, into one output; ``fallback(x, allocate)`` for inputs it does not handle."""

    def __init__(self, scale: np.ndarray | None, shift: np.ndarray, relu: bool,
                 fallback: Callable[[np.ndarray, Callable], np.ndarray]) -> None:
        self.shift = shift.reshape(-1, 1, 1)
        self.scale = None if scale is None else scale.reshape(-1, 1, 1)
        self.relu = relu
        self.fallback = fallback
        # Per image shape (C, H, W): scale and shift broadcast to it (numpy multiplies and adds
        # arrays of one shape faster than it broadcasts a column).
        self.full: PlanCache[tuple[np.ndarray | None, np.ndarray]] = PlanCache()

    def __call__(self, x: np.ndarray, *, allocate: Callable = np.empty) -> np.ndarray:
        if (not isinstance(x, np.ndarray) or x.ndim != 4 or x.dtype != self.shift.dtype
                or x.shape[1] != self.shift.shape[0] or not x.flags.c_contiguous):
            return self.fallback(x, allocate)
        full = self.full.get(x.shape[1:])
        if full is None:
            full, nbytes = self._full(x.shape[1:])
            self.full.put(x.shape[1:], full, nbytes)
        y = allocate(x.shape, x.dtype)
        if full[0] is None:
            np.add(x, full[1], out=y)
        else:
            np.multiply(x, full[0], out=y)
            np.add(y, full[1], out=y)
        if self.relu:
            fused_activation.apply_into(y, y, "Relu", ())
        return y

    def _full(self, image: tuple[int, ...]) -> tuple[tuple[np.ndarray | None, np.ndarray], int]:
        """Scale and shift at the image's shape where the cache has room for them, else the
        (C, 1, 1) columns; and the bytes made."""
        count = 1 if self.scale is None else 2
        if not self.full.affords(count * math.prod(image) * self.shift.itemsize):
            return (self.scale, self.shift), 0
        scale = None if self.scale is None else np.ascontiguousarray(np.broadcast_to(self.scale, image))
        shift = np.ascontiguousarray(np.broadcast_to(self.shift, image))
        return (scale, shift), count * shift.nbytes
