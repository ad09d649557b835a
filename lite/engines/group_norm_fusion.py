"""The numpy engine's group normalization fusion (applied by :func:`lite.engines.numpy_fusions.fuse`).

Exporters write ``GroupNorm(G)`` of an image ``x`` (N, C, H, W) as an instance normalization of
``x`` seen as G planes per image, reshaped back, then the per-channel affine map (BiT's
GroupNorm before every convolution; seven nodes and a Relu)::

    x ─┬─► Reshape(0, G, -1) ─► InstanceNormalization(s, b) ─► Reshape ─► Mul(γ) ─► Add(β) ─► Relu ─► y
       └─► Shape ─────────────────────────────────────────────────┘

:func:`fuse_group_norm` makes that one step, :class:`GroupNormAffine`: per image and group, the
mean ``m`` and the variance ``v`` over the group's C/G channels and pixels, then for channel c
of group g::

    y = (x - m) * (s_g γ_c / sqrt(v + ε)) + (b_g γ_c + β_c)          (then the Relu, if any)

which is the nodes' ``((x - m) / sqrt(v + ε) * s_g + b_g) * γ_c + β_c`` with the two scalings
folded into one (a rounding difference of the order of float32's epsilon). Inputs it does not
handle (not a float image of the constants' type with C channels) run the original steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.ops import fused_activation

if TYPE_CHECKING:
    from lite.engines.numpy_engine import _Step


def _only_step(value: int, readers: dict[int, list[_Step]], graph_outputs: set[int], op_type: str):
    """The one step reading ``value``, if it is a plain ``op_type`` node."""
    steps = readers.get(value, [])
    if len(steps) != 1 or value in graph_outputs:
        return None
    step = steps[0]
    plain = (step.node.op_type == op_type and not step.node.domain and step.inline and step.activation is None
             and not step.graph_attributes)
    return step if plain else None


def _per_channel(value: Any) -> np.ndarray | None:
    """``value`` as a vector if it is a float constant of shape (C, 1, 1) or (1, C, 1, 1)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim not in (3, 4):
        return None
    if value.shape[-2:] != (1, 1) or (value.ndim == 4 and value.shape[0] != 1):
        return None
    return value.reshape(-1)


def _match(reshape: _Step, readers: dict[int, list[_Step]], constants: dict[int, Any],
           producer_of: dict[int, _Step], graph_outputs: set[int]):
    """(steps, groups, scale, bias, epsilon, gamma, beta, relu) of the block starting at
    ``reshape``, or a string saying why there is none."""
    if len(reshape.inputs) != 2 or reshape.attributes.get("allowzero", 0):
        return "not a two-input Reshape without allowzero"
    target = constants.get(reshape.inputs[1])
    if not isinstance(target, np.ndarray) or target.shape != (3,) or target[0] != 0 or target[2] != -1:
        return "the Reshape's shape is not the constant (0, G, -1)"
    groups = int(target[1])
    norm = _only_step(reshape.outputs[0], readers, graph_outputs, "InstanceNormalization")
    if norm is None or len(norm.inputs) != 3 or norm.inputs[0] != reshape.outputs[0]:
        return "the Reshape's one reader is not an InstanceNormalization"
    scale, bias = constants.get(norm.inputs[1]), constants.get(norm.inputs[2])
    if (not isinstance(scale, np.ndarray) or not isinstance(bias, np.ndarray) or scale.shape != (groups,)
            or bias.shape != (groups,) or scale.dtype.kind != "f" or bias.dtype != scale.dtype):
        return "the InstanceNormalization's scale and bias are not constants of G floats"
    back = _only_step(norm.outputs[0], readers, graph_outputs, "Reshape")
    shape = producer_of.get(back.inputs[1]) if back is not None and len(back.inputs) == 2 else None
    if (shape is None or back.inputs[0] != norm.outputs[0] or shape.node.op_type != "Shape" or shape.node.domain
            or shape.inputs[:1] != reshape.inputs[:1] or shape.attributes.get("start", 0) != 0
            or shape.attributes.get("end") is not None or back.attributes.get("allowzero", 0)):
        return "the normalized planes are not reshaped back to the input's Shape"
    mul = _only_step(back.outputs[0], readers, graph_outputs, "Mul")
    gamma = None if mul is None or len(mul.inputs) != 2 else _per_channel(constants.get(mul.inputs[1]))
    add = None if gamma is None or mul.inputs[0] != back.outputs[0] else _only_step(
        mul.outputs[0], readers, graph_outputs, "Add")
    beta = None if add is None or len(add.inputs) != 2 else _per_channel(constants.get(add.inputs[1]))
    if (beta is None or add.inputs[0] != mul.outputs[0] or gamma.shape != beta.shape or gamma.dtype != scale.dtype
            or beta.dtype != scale.dtype or gamma.size % groups):
        return "no per-channel Mul and Add of constants after the normalization"
    relu = _only_step(add.outputs[0], readers, graph_outputs, "Relu")
    steps = [reshape, norm, back, mul, add] + ([relu] if relu is not None else [])
    if len(readers.get(shape.outputs[0], [])) == 1 and shape.outputs[0] not in graph_outputs:
        steps.insert(1, shape)
    return steps, groups, scale, bias, float(norm.attributes.get("epsilon", 1e-5)), gamma, beta, relu is not None


def fuse_group_norm(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """Every block of the module docstring's shape as one :class:`GroupNormAffine` step, at the
    place of its last step."""
    readers: dict[int, list[_Step]] = {}
    for step in steps:
        for index in set(step.inputs):
            readers.setdefault(index, []).append(step)
    producer_of = {step.outputs[0]: step for step in steps if step.outputs}
    replaced: dict[int, _Step] = {}
    dropped: set[int] = set()
    for reshape in steps:
        if reshape.node.op_type != "Reshape" or reshape.node.domain or not reshape.inline or id(reshape) in dropped:
            continue
        match = _match(reshape, readers, constants, producer_of, graph_outputs)
        if isinstance(match, str):
            continue
        block, groups, scale, bias, epsilon, gamma, beta, relu = match
        x = reshape.inputs[0]
        kernel = GroupNormAffine(groups, scale, bias, epsilon, gamma, beta, relu,
                                 _InTurn(block, x, constants))
        last = block[-1]
        replaced[id(last)] = replace(
            block[1 if block[1].node.op_type == "InstanceNormalization" else 2], fn=kernel, inputs=[x],
            outputs=last.outputs, attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
            wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[], release=[])
        dropped.update(id(step) for step in block[:-1])
    if not replaced:
        return steps
    return [replaced.get(id(step), step) for step in steps if id(step) not in dropped]


class _InTurn:
    """The block's own kernels one after the other (for inputs the fused kernel does not handle)."""

    def __init__(self, block: list[_Step], x_index: int, constants: dict[int, Any]) -> None:
        self.block = block
        self.x_index = x_index
        self.constants = constants

    def __call__(self, x: np.ndarray, allocate: Callable) -> np.ndarray:
        values = {self.x_index: x}
        for step in self.block:
            args = [values.get(i, self.constants.get(i)) if i >= 0 else None for i in step.inputs]
            if step.wants_allocate:
                result = step.fn(*args, allocate=allocate, **step.keywords)
            else:
                result = step.fn(*args, **step.keywords)
            values[step.outputs[0]] = result[0] if type(result) is tuple else result
        return values[self.block[-1].outputs[0]]


class GroupNormAffine:
    """``GroupNorm(G)`` of an image with a per-channel scale and shift, and an optional Relu
    (see the module docstring); ``fallback(x, allocate)`` for inputs it does not handle."""

    def __init__(self, groups: int, scale: np.ndarray, bias: np.ndarray, epsilon: float, gamma: np.ndarray,
                 beta: np.ndarray, relu: bool, fallback: Callable[[np.ndarray, Callable], np.ndarray]) -> None:
        channels = gamma.size
        self.groups = groups
        self.dtype = gamma.dtype
        per_group = channels // groups
        # (G, C/G): channel c of group g at [g, c % (C/G)]
        self.gain = (scale[:, None] * gamma.reshape(groups, per_group)).astype(self.dtype)
        self.shift = (bias[:, None] * gamma.reshape(groups, per_group) + beta.reshape(groups, per_group)).reshape(
            channels, 1).astype(self.dtype)
        self.epsilon = self.dtype.type(epsilon)
        self.relu = relu
        self.fallback = fallback

    def __call__(self, x: np.ndarray, *, allocate: Callable = np.empty) -> np.ndarray:
        channels = self.shift.shape[0]
        if x.ndim < 3 or x.dtype != self.dtype or x.shape[1] != channels or not x.size:
            return self.fallback(x, allocate)
        batch = x.shape[0]
        planes = x.reshape(batch, self.groups, -1)  # a copy only for a channels-last x
        inverse_size = x.dtype.type(1.0 / planes.shape[2])
        mean = np.add.reduce(planes, axis=2, keepdims=True)
        mean *= inverse_size
        centered = allocate(planes.shape, x.dtype)
        np.subtract(planes, mean, out=centered)
        variance = np.einsum("ngk,ngk->ng", centered, centered)
        variance *= inverse_size
        variance += self.epsilon
        np.sqrt(variance, out=variance)
        gain = np.divide(self.gain, variance[:, :, None])  # (N, G, C/G)
        y = centered.reshape(batch, channels, -1)
        y *= gain.reshape(batch, channels, 1)
        y += self.shift
        if self.relu:
            fused_activation.apply_into(y, y, "Relu", ())
        return y.reshape(x.shape)
