"""The numpy engine's convolution fusions (applied by :func:`lite.engines.numpy_fusions.fuse`).

Each step of a 64x64 CNN costs a few numpy calls of 1-2 µs; ONNX Runtime takes about six µs per
node in all. RepVGG's training-form blocks are two thirds Adds, Muls and Relus around their
convolutions, and the branches themselves are two convolutions where one would do.

- :func:`merge_parallel_convs`: convolutions of one input whose outputs are summed are one
  convolution, by the linearity of convolution: ``conv(x, Wa) + ba + conv(x, Wb) + bb =
  conv(x, Wa + Wb') + (ba + bb)``, ``Wb'`` the smaller kernel zero-padded to the larger one's
  extent at the offset where it reads the same pixels. A per-channel affine map of the input
  ``x * s + t`` (a BatchNormalization folded by the converter) is the 1x1 convolution of
  weights ``diag(s)`` and bias ``t``. RepVGG's training-form block becomes one 3x3 convolution (the re-parameterization its authors do offline)::

      x ─┬─► Conv 3x3 ──────┐
         ├─► Conv 1x1 ──────┴─► Add ─┐
         └─► Mul(s) ─► Add(t) ───────┴─► Add ─► Relu ─► y    becomes    x ─► Conv 3x3 (Relu) ─► y

The fusion keeps the values the graph returns and every intermediate another step reads. The
merged convolution sums in another order than the nodes did (a rounding difference of the order
of float32's epsilon per product). It declines with the reason (:func:`_branch`,
:func:`_merge_reason`).

- :func:`lite.engines.conv_chain.fuse_conv_chains`: convolutions that feed only each other, and
  the residual Add that may end them, as one step (see that module).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.conv_chain import fuse_conv_chains
from lite.engines.numpy_patterns import Graph, plain

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

_RELU = ("Relu", ())


def fuse(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with the convolution fusions applied."""
    steps = merge_parallel_convs(steps, constants, graph_outputs)
    return fuse_conv_chains(steps, constants, graph_outputs)


def _plain_binary(step: _Step | None, op_type: str) -> bool:
    return step is not None and step.node.op_type == op_type and plain(step, 2)


# -- parallel convolutions -------------------------------------------------------------------------
@dataclass
class _Branch:
    """A linear map of ``x`` computed by ``steps``: the convolution of ``weights`` (M, C, kh, kw)
    with ``begin``/``end`` pads, ``strides``, ``dilations``, plus ``bias`` (M,)."""

    x: int
    weights: np.ndarray
    bias: np.ndarray
    begin: tuple[int, ...]
    end: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    steps: list[_Step]
    conv: _Step | None  # the convolution step the merged one is modelled on


def _branch(value: int, producer_of: dict[int, _Step], constants: dict[int, Any],
            merged: dict[int, _Branch]) -> _Branch | str:
    """The branch computing ``value``, or why it is not one."""
    if value in merged:
        return merged[value]
    step = producer_of.get(value)
    if step is None:
        return "not computed by a step"
    if step.node.op_type == "Conv" and not step.node.domain:
        return _conv_branch(step, constants)
    if _plain_binary(step, "Add"):
        for position in (0, 1):
            scaled, shift = step.inputs[position], constants.get(step.inputs[1 - position])
            mul = producer_of.get(scaled)
            if shift is not None and _plain_binary(mul, "Mul"):
                for side in (0, 1):
                    x, scale = mul.inputs[side], constants.get(mul.inputs[1 - side])
                    if x not in constants and scale is not None:
                        return _affine_branch(x, scale, shift, [mul, step])
    return f"{step.node.op_type} is neither a convolution nor a per-channel x * s + t"


def _conv_branch(step: _Step, constants: dict[int, Any]) -> _Branch | str:
    weights = constants.get(step.inputs[1]) if len(step.inputs) > 1 else None
    bias = constants.get(step.inputs[2]) if len(step.inputs) > 2 else None
    attributes = step.attributes
    if not step.inline or step.activation is not None:
        return "the convolution applies an activation"
    if not isinstance(weights, np.ndarray) or weights.ndim != 4 or weights.dtype.kind != "f":
        return "the convolution's weights are not a constant 2-D float kernel"
    if len(step.inputs) > 2 and (not isinstance(bias, np.ndarray) or bias.shape != weights.shape[:1]
                                 or bias.dtype != weights.dtype):
        return "the convolution's bias is not a constant of its weights' type"
    if attributes.get("group", 1) != 1 or attributes.get("auto_pad", "NOTSET") != "NOTSET":
        return "grouped or auto-padded convolution"
    pads = attributes.get("pads") or [0] * 4
    strides = attributes.get("strides") or [1, 1]
    dilations = attributes.get("dilations") or [1, 1]
    kernel_shape = attributes.get("kernel_shape")
    if (len(pads) != 4 or len(strides) != 2 or len(dilations) != 2 or min(pads) < 0 or min(strides) < 1
            or min(dilations) < 1 or (kernel_shape is not None and list(kernel_shape) != list(weights.shape[2:]))):
        return "the convolution's attributes are not those of a 2-D convolution"
    if step.inputs[0] in constants or step.inputs[0] < 0:
        return "the convolution's input is a constant"
    if bias is None:
        bias = np.zeros(weights.shape[0], weights.dtype)
    return _Branch(step.inputs[0], weights, bias, tuple(pads[:2]), tuple(pads[2:]), tuple(strides), tuple(dilations),
                   [step], step)


def _affine_branch(x: int, scale: np.ndarray, shift: np.ndarray, steps: list[_Step]) -> _Branch | str:
    """``x * scale + shift`` with per-channel constants: the 1x1 convolution by ``diag(scale)``."""
    if not isinstance(scale, np.ndarray) or not isinstance(shift, np.ndarray):
        return "the affine map's scale or shift is not an array"
    if scale.dtype.kind != "f" or scale.dtype != shift.dtype:
        return "the affine map's scale and shift are not floats of one type"
    channels = max(scale.size, shift.size)
    for operand in (scale, shift):
        if operand.ndim > 4 or operand.size not in (1, channels) or (
                operand.size > 1 and operand.shape[-3:] != (channels, 1, 1)):
            return "the affine map is not per channel of an image (C, 1, 1)"
    if channels == 1:
        return "the affine map's channel count is unknown (scalar scale and shift)"
    weights = np.zeros((channels, channels, 1, 1), scale.dtype)
    weights[np.arange(channels), np.arange(channels), 0, 0] = np.broadcast_to(scale.reshape(-1), (channels,))
    bias = np.broadcast_to(shift.reshape(-1), (channels,)).copy()
    return _Branch(x, weights, bias, (0, 0), (0, 0), (1, 1), (1, 1), steps, None)


def _merge_reason(a: _Branch, b: _Branch) -> str | None:
    """Why ``a`` and ``b`` cannot be one convolution (None when they can: same input, strides
    and dilations, and the smaller kernel reads, at every output pixel, pixels the larger reads)."""
    if a.x != b.x:
        return "the branches read different inputs"
    if a.strides != b.strides or a.dilations != b.dilations:
        return "the branches' strides or dilations differ"
    if a.weights.shape[:2] != b.weights.shape[:2] or a.weights.dtype != b.weights.dtype:
        return "the branches' channel counts or weight types differ"
    if _offsets(a, b) is None and _offsets(b, a) is None:
        return "neither kernel's window lies inside the other's"
    return None


def _offsets(large: _Branch, small: _Branch) -> tuple[int, int] | None:
    """Where ``small``'s kernel sits in ``large``'s, if it reads the same pixels there."""
    offsets = []
    for axis in (0, 1):
        dilation = large.dilations[axis]
        shift = large.begin[axis] - small.begin[axis]
        spare = large.weights.shape[2 + axis] - small.weights.shape[2 + axis]
        if shift < 0 or shift % dilation or not 0 <= shift // dilation <= spare:
            return None
        # Equal output sizes for every input size: the windows end equally far past the image.
        if large.end[axis] - small.end[axis] != (spare - shift // dilation) * dilation:
            return None
        offsets.append(shift // dilation)
    return offsets[0], offsets[1]


def _merge(a: _Branch, b: _Branch, add: _Step) -> _Branch:
    large, small = (a, b) if _offsets(a, b) is not None else (b, a)
    top, left = _offsets(large, small)
    weights = large.weights.copy()
    height, width = small.weights.shape[2:]
    weights[:, :, top : top + height, left : left + width] += small.weights
    conv = large.conv if large.conv is not None else small.conv
    return _Branch(a.x, weights, large.bias + small.bias, large.begin, large.end, large.strides, large.dilations,
                   a.steps + b.steps + [add], conv)


def merge_parallel_convs(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """Adds of two linear maps of one input (:class:`_Branch`: convolutions, per-channel affine
    maps, sums of these already merged) whose intermediates are read once: one convolution,
    with the Relu that is the sum's one reader, if any, as its fused activation."""
    graph = Graph(steps, graph_outputs)
    merged: dict[int, _Branch] = {}  # an Add's output -> the branch it now is
    for add in steps:
        if not _plain_binary(add, "Add") or add.inputs[0] == add.inputs[1]:
            continue
        branches = [_branch(value, graph.producer_of, constants, merged) for value in add.inputs]
        if any(isinstance(branch, str) for branch in branches):
            continue
        a, b = branches
        if _merge_reason(a, b) is not None or (a.conv is None and b.conv is None):
            continue
        inner = [step.outputs[0] for step in a.steps + b.steps]
        if not all(graph.single(value) for value in inner):
            continue
        merged[add.outputs[0]] = _merge(a, b, add)
        for value in add.inputs:
            merged.pop(value, None)
    if not merged:
        return steps
    replaced: dict[int, _Step] = {}  # id(step the fused one takes the place of) -> the fused step
    dropped: set[int] = set()
    for output, branch in merged.items():
        last = branch.steps[-1]
        relu = graph.only_reader(output, "Relu", 1, None)
        fused = _merged_conv_step(branch, last.outputs if relu is None else relu.outputs, relu is not None)
        dropped.update(id(step) for step in branch.steps)
        if relu is not None:
            dropped.add(id(relu))
        replaced[id(last)] = fused
        dropped.discard(id(last))
    return [replaced.get(id(step), step) for step in steps if id(step) not in dropped]


def _merged_conv_step(branch: _Branch, outputs: list[int], relu: bool) -> _Step:
    from lite.ops.conv import Conv, prepare_conv

    attributes = {"pads": [*branch.begin, *branch.end], "strides": list(branch.strides),
                  "dilations": list(branch.dilations)}
    weights = np.ascontiguousarray(branch.weights)
    prepared = prepare_conv([None, weights, branch.bias], [None, None, None], **attributes)
    kernel = _MergedConv(Conv, weights, branch.bias, prepared, attributes)
    return replace(branch.conv, fn=kernel, inputs=[branch.x], outputs=list(outputs), attributes={}, output_count=None,
                   activation=_RELU if relu else None, kernel_applies_activation=relu, wants_allocate=True,
                   prepare=None, prepared=None, memo=None, memo_sources=[], release=[])


class _MergedConv:
    """The merged convolution: the Conv kernel with the merged weights and bias, prepared once."""

    def __init__(self, conv: Callable, weights: np.ndarray, bias: np.ndarray, prepared: Any,
                 attributes: dict[str, Any]) -> None:
        self.conv = conv
        self.weights = weights
        self.bias = bias
        self.prepared = prepared
        self.attributes = attributes

    def __call__(self, x: np.ndarray, *, allocate: Callable, fused_activation=None) -> np.ndarray:
        return self.conv(x, self.weights, self.bias, prepared=self.prepared, fused_activation=fused_activation,
                         allocate=allocate, **self.attributes)
