"""The numpy engine's group normalization fusions (applied by :func:`lite.engines.numpy_fusions.fuse`).

Exporters write ``GroupNorm(G)`` of an image ``x`` (N, C, H, W) as an instance normalization of
``x`` seen as G planes per image, reshaped back, then the per-channel affine map::

    x ─┬─► Reshape(0, G, -1) ─► InstanceNormalization(s, b) ─► Reshape ─► Mul(γ) ─► Add(β) ─► [Relu] ─► y
       └─► Shape ─────────────────────────────────────────────────┘

Both fusions find the Reshapes around the InstanceNormalization with :func:`match_planes` and
compute, per image and group, the mean ``m`` and the variance ``v`` over the group's channels
and pixels, then for channel c of group g::

    y = (x - m) * (s_g γ_c / sqrt(v + ε)) + (b_g γ_c + β_c)

which is the nodes' ``((x - m) / sqrt(v + ε) * s_g + b_g) * γ_c + β_c`` with the two scalings
folded into one at load (:func:`fold_affine`; a rounding difference of the order of float32's
epsilon):

- :func:`fuse_one_group_norm`: ``GroupNorm(1, C)`` (PoolFormer, MobileViTv2), its Mul and Add
  optional and of any constants that broadcast, as :class:`FusedGroupNorm`. The Reshape to
  ``(N, 1, -1)`` copies a channels-last activation (lite.ops._layout) on every call; the fused
  step takes each sample's statistics from x in whatever layout it has (one group spans all of
  a sample).
- :func:`fuse_group_norm`: any G with per-channel γ and β and an optional Relu (BiT's GroupNorm
  before every convolution, seven nodes and a Relu), as :class:`GroupNormAffine`. Either of the
  Mul and the Add may be missing (γ = 1 or β = 0: a converter drops a Mul by ones and an Add
  of zeros, as it did after most of BiT's convolutions), but not both.

Inputs a fused step does not handle run the original steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import (
    FLOATS,
    Graph,
    broadcasts_to,
    constant_of,
    in_turn,
    ones,
    per_channel,
    plain,
    run_in_turn,
)
from lite.ops import fused_activation

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


@dataclass
class Planes:
    """An InstanceNormalization of ``x`` seen as ``groups`` planes per image, reshaped back to
    x's shape: what both fusions start from."""

    x: int
    split: _Step  # Reshape(x, (0, G, -1))
    norm: _Step  # InstanceNormalization(planes, scale, bias)
    merge: _Step  # Reshape(normalized, Shape(x))
    shape: _Step  # Shape(x)
    groups: int
    scale: np.ndarray
    bias: np.ndarray
    epsilon: float


def match_planes(norm: _Step, graph: Graph, constants: dict[int, Any]) -> Planes | str:
    """The :class:`Planes` around ``norm`` (a plain InstanceNormalization), or why there are none."""
    split = graph.producer(norm.inputs[0], "Reshape", 2)
    target = constants.get(split.inputs[1]) if split is not None else None
    if (not isinstance(target, np.ndarray) or target.shape != (3,) or target[0] != 0 or target[1] < 1
            or target[2] != -1 or split.inputs[0] in constants or split.attributes.get("allowzero", 0)):
        return "the input is not reshaped to the constant (0, G, -1) without allowzero"
    groups, x = int(target[1]), split.inputs[0]
    scale, bias = constants.get(norm.inputs[1]), constants.get(norm.inputs[2])
    if (not isinstance(scale, np.ndarray) or not isinstance(bias, np.ndarray) or scale.shape != (groups,)
            or bias.shape != (groups,) or scale.dtype.kind != "f" or bias.dtype != scale.dtype):
        return "the InstanceNormalization's scale and bias are not constants of G floats"
    merge = graph.only_reader(norm.outputs[0], "Reshape", 2, None)
    shape = graph.producer_of.get(merge.inputs[1]) if merge is not None else None
    if (shape is None or shape.node.op_type != "Shape" or shape.node.domain or shape.inputs[:1] != [x]
            or shape.attributes.get("start", 0) != 0 or shape.attributes.get("end") is not None
            or merge.attributes.get("allowzero", 0)):
        return "the normalized planes are not reshaped back to the input's Shape"
    return Planes(x, split, norm, merge, shape, groups, scale, bias, float(norm.attributes.get("epsilon", 1e-5)))


def fold_affine(scale: Any, bias: Any, gamma: Any, beta: Any) -> tuple[Any, Any]:
    """(s·γ, b·γ + β): the InstanceNormalization's scale and bias taken into the affine map
    after it once, at load, so that a run scales and shifts each value once."""
    return np.multiply(scale, gamma), np.add(np.multiply(bias, gamma), beta)


def _deviation(squares: np.ndarray, inverse_size: Any, epsilon: Any) -> np.ndarray:
    """``sqrt(squares / size + ε)``, in ``squares``: the standard deviations from the sums of
    squared deviations."""
    squares *= inverse_size
    squares += epsilon
    return np.sqrt(squares, out=squares)


def _fused_step(template: _Step, kernel: Callable, x: int, outputs: list[int]) -> _Step:
    """``template`` running ``kernel`` on ``x`` into ``outputs``: a fused block's one step."""
    return replace(template, fn=kernel, inputs=[x], outputs=outputs, attributes={}, output_count=None,
                   activation=None, kernel_applies_activation=False, wants_allocate=True, prepare=None,
                   prepared=None, memo=None, memo_sources=[])


# -- group normalization with one group -----------------------------------------------------------


def fuse_one_group_norm(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every one-group GroupNorm replaced by a :class:`FusedGroupNorm` step, at
    the place of the block's last step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "InstanceNormalization" or not plain(step, 3):
            continue
        match, _reason = match_one_group_norm(step, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match.block):
            continue
        last = match.block[-1]
        fused[id(last)] = _fused_step(last, match, match.x, [last.outputs[0]])
        dropped.update(id(s) for s in match.block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def match_one_group_norm(norm: _Step, graph: Graph, constants: dict[int, Any]):
    """The :class:`FusedGroupNorm` of the one-group GroupNorm around ``norm``, or None; and the
    reason it is not one."""
    planes = match_planes(norm, graph, constants)
    if isinstance(planes, str):
        return None, planes
    scale = planes.scale
    if planes.groups != 1 or scale.dtype not in FLOATS:
        return None, "not one group of float32 or float64"
    if not graph.single(planes.shape.outputs[0]):
        return None, "the input's Shape is read elsewhere"
    block = [planes.shape, planes.split, norm, planes.merge]
    gain, shift, output = np.ones((), scale.dtype), np.zeros((), scale.dtype), planes.merge.outputs[0]
    for op_type in ("Mul", "Add"):
        step = graph.only_reader(output, op_type, 2, None, first=False)
        if step is None:
            continue
        position, value = constant_of(step, constants)
        if value is None or step.inputs[1 - position] != output or value.dtype != scale.dtype:
            continue
        if op_type == "Mul":
            gain = value
        else:
            shift = value
        block.append(step)
        output = step.outputs[0]
    block.sort(key=lambda step: graph.position[id(step)])
    if block[-1].outputs[0] != output:
        return None, "the block's last node does not run last"
    return FusedGroupNorm(block, planes.x, scale, planes.bias, gain, shift, planes.epsilon, constants), ""


class FusedGroupNorm:
    """The one-group fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], x: int, scale: np.ndarray, bias: np.ndarray, gain: np.ndarray,
                 shift: np.ndarray, epsilon: float, constants: dict[int, Any]) -> None:
        self.block = block
        self.x = x
        self.dtype = scale.dtype
        # Per channel: what the normalized value is multiplied by (before 1/std) and shifted by.
        self.gain, self.shift = fold_affine(scale.reshape(()), bias.reshape(()), gain, shift)
        self.epsilon = self.dtype.type(epsilon)
        self.constants = constants
        from lite.ops._helpers import einsum

        self.einsum = einsum

    def __call__(self, x: Any, allocate: Callable = np.empty) -> np.ndarray:
        rows = _sample_rows(x) if type(x) is np.ndarray and x.dtype == self.dtype and x.ndim >= 3 and x.size else None
        if (rows is None or self.gain.ndim > x.ndim or self.shift.ndim > x.ndim
                or not broadcasts_to(self.gain.shape, x.shape[1:]) or not broadcasts_to(self.shift.shape, x.shape[1:])):
            return run_in_turn(self.block, self.x, x, self.constants, allocate)
        batch, width = rows.shape
        statistics = (batch,) + (1,) * (x.ndim - 1)
        inverse_width = x.dtype.type(1.0 / width)
        mean = np.matmul(rows, ones(width, x.dtype))
        mean *= inverse_width
        centered = np.subtract(x, mean.reshape(statistics))
        centered_rows = _sample_rows(centered)
        if centered_rows is None:
            centered = np.ascontiguousarray(centered)
            centered_rows = centered.reshape(batch, width)
        deviation = _deviation(self.einsum("ij,ij->i", centered_rows, centered_rows), inverse_width, self.epsilon)
        centered *= np.divide(self.gain, deviation.reshape(statistics))
        centered += self.shift
        return centered


def _sample_rows(x: np.ndarray) -> np.ndarray | None:
    """``x`` (N, C, *spatial) as an (N, C * pixels) view in its memory order (C-contiguous or
    channels-last), or None."""
    from lite.ops._layout import channels_last_order, is_channels_last

    if x.flags.c_contiguous:
        return x.reshape(x.shape[0], -1)
    if is_channels_last(x):
        return x.transpose(channels_last_order(x.ndim)).reshape(x.shape[0], -1)
    return None


# -- group normalization with per-channel γ and β (and a Relu) ------------------------------------


def fuse_group_norm(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """Every block of the module docstring's shape with per-channel γ and β as one
    :class:`GroupNormAffine` step, at the place of its last step."""
    graph = Graph(steps, graph_outputs)
    replaced: dict[int, _Step] = {}
    dropped: set[int] = set()
    for norm in steps:
        if norm.node.op_type != "InstanceNormalization" or not plain(norm, 3):
            continue
        match = _match_affine(norm, graph, constants)
        if isinstance(match, str):
            continue
        planes, block, gamma, beta, relu = match
        kernel = GroupNormAffine(planes.groups, planes.scale, planes.bias, planes.epsilon, gamma, beta, relu,
                                 in_turn(block, planes.x, constants))
        replaced[id(block[-1])] = _fused_step(norm, kernel, planes.x, block[-1].outputs)
        dropped.update(id(step) for step in block[:-1])
    return [replaced.get(id(step), step) for step in steps if id(step) not in dropped]


def _match_affine(norm: _Step, graph: Graph, constants: dict[int, Any]):
    """(planes, steps, gamma, beta, relu) of the block around ``norm``, or a string saying why
    there is none."""
    planes = match_planes(norm, graph, constants)
    if isinstance(planes, str):
        return planes
    merge, scale = planes.merge, planes.scale
    mul, gamma = _by_constant(graph, constants, merge.outputs[0], "Mul")
    if gamma is None:
        mul = None  # γ = 1: a converter drops a Mul by ones
    add, beta = _by_constant(graph, constants, merge.outputs[0] if mul is None else mul.outputs[0], "Add")
    if beta is None:
        add = None  # β = 0: a converter drops an Add of zeros
    if gamma is None and beta is None:
        return "no per-channel Mul or Add of constants after the normalization"
    if gamma is None:
        gamma = np.ones_like(beta)
    elif beta is None:
        beta = np.zeros_like(gamma)
    if gamma.shape != beta.shape or gamma.dtype != scale.dtype or beta.dtype != scale.dtype or gamma.size % planes.groups:
        return "the per-channel Mul and Add after the normalization do not fit its groups and type"
    last = add if add is not None else mul
    relu = graph.only_reader(last.outputs[0], "Relu", 1, None)
    steps = [planes.split, norm, merge] + [step for step in (mul, add, relu) if step is not None]
    if graph.single(planes.shape.outputs[0]):
        steps.insert(1, planes.shape)
    return planes, steps, gamma, beta, relu is not None


def _by_constant(graph: Graph, constants: dict[int, Any], value: int, op_type: str):
    """(the step, its per-channel constant) where ``value``'s one reader is a plain binary
    ``op_type`` of it and such a constant, on either side; else (None, None)."""
    step = graph.only_reader(value, op_type, 2, None, first=False)
    if step is None:
        return None, None
    constant = per_channel(constants.get(step.inputs[1] if step.inputs[0] == value else step.inputs[0]))
    return (step, constant) if constant is not None else (None, None)


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
        self.gain, shift = fold_affine(scale[:, None], bias[:, None], gamma.reshape(groups, per_group),
                                       beta.reshape(groups, per_group))
        self.shift = shift.reshape(channels, 1)
        self.epsilon = self.dtype.type(epsilon)
        self.relu = relu
        # The Relu with its bounds typed once (the generic dispatch cost ~2 µs of a 4 µs pass).
        self.activate = fused_activation.into("Relu", (), self.dtype) if relu else None
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
        # Each group's sum of squares as a batch of row-by-column products: BLAS's dot, about
        # half of einsum's time on BiT's 16x16 maps.
        squares = np.matmul(centered[:, :, None, :], centered[:, :, :, None]).reshape(batch, self.groups)
        deviation = _deviation(squares, inverse_size, self.epsilon)
        gain = np.divide(self.gain, deviation[:, :, None])  # (N, G, C/G)
        y = centered.reshape(batch, channels, -1)
        y *= gain.reshape(batch, channels, 1)
        y += self.shift
        if self.activate is not None:
            self.activate(y, y)
        return y.reshape(x.shape)
