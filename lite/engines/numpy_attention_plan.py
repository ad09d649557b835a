"""A fused attention step's work for one set of q, k and v shapes, checked once.

:class:`lite.engines.numpy_attention.FusedAttention` checks, on every call, what its inputs must
be for the fused computation (float operands of one type, rank 4 after the head split, a scale
and masks that broadcast to the scores, reshape targets that fit). On LeViT's and a small ViT's
attention (4 to 65 tokens) those checks cost as much as the products themselves. Everything they
depend on is known from the shapes of q, k and v, the element type, the masks' shapes and the
values of the shape tensors, so :func:`plan_attention` works it out once and an
:class:`AttentionPlan` keeps it: a call then checks only that its inputs are the ones the plan
was made for (the same element type, masks of the same shapes and type, shape tensors of the
same values, by identity where they are read-only) and runs the same numpy operations in the
same order as the unplanned step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, broadcasts_to

if TYPE_CHECKING:
    from lite.engines.numpy_attention import FusedAttention


class AttentionPlan:
    """The fused computation for one set of shapes (see the module docstring)."""

    def __init__(self, dtype: np.dtype, operations: list[list[tuple[str, Any]]], scale: np.ndarray | None,
                 divide: bool, masks: list[list[Any]], shapes: list[list[Any]], softmax: Callable,
                 nan_fill: np.ndarray | None, merge: tuple[Any, ...] | None) -> None:
        self.dtype = dtype
        self.q, self.k, self.v = operations
        self.scale = scale
        self.rescale = np.divide if divide else np.multiply
        # [position, the array if read-only (then known by identity) else None, shape]
        self.masks = masks
        self.mask_positions = [entry[0] for entry in masks]
        # [position, the array if read-only else None, its shape, its bytes]
        self.shapes = shapes
        self.softmax = softmax
        self.nan_fill = nan_fill
        # ("buffer", merged order's shape, inverse perm, target) or ("copy", perm, target)
        self.merge = merge

    def accepts(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` (whose q, k and v have the plan's shapes) are inputs it was made for."""
        dtype = self.dtype
        if args[0].dtype != dtype or args[1].dtype != dtype or args[2].dtype != dtype:
            return False
        for entry in self.masks:
            mask = args[entry[0]]
            if mask is not entry[1] and (type(mask) is not np.ndarray or mask.shape != entry[2]
                                         or mask.dtype != dtype):
                return False
        for entry in self.shapes:
            target = args[entry[0]]
            if target is entry[1]:
                continue
            if (type(target) is not np.ndarray or target.dtype != np.int64 or target.shape != entry[2]
                    or target.tobytes() != entry[3]):
                return False
            if not target.flags.writeable:  # the engine's remembered value: known by identity from now on
                entry[1] = target
        return True

    def run(self, args: tuple[Any, ...]) -> np.ndarray:
        """The block's output for accepted ``args``."""
        q, k, v = (apply_operations(args[0], self.q), apply_operations(args[1], self.k),
                   apply_operations(args[2], self.v))
        scores = np.matmul(q, k)
        if self.scale is not None:
            self.rescale(scores, self.scale, out=scores)
        for position in self.mask_positions:
            np.add(scores, args[position], out=scores)
        probabilities = self.softmax(scores)
        if self.nan_fill is not None:
            nan = np.isnan(probabilities)
            if nan.any():
                probabilities = np.where(nan, self.nan_fill, probabilities)
        merge = self.merge
        if merge is None:
            return np.matmul(probabilities, v)
        if merge[0] == "buffer":
            # The product written through the merge's transpose into a buffer in the merged
            # order: its reshape is then a view, not a copy.
            merged = np.empty(merge[1], self.dtype)
            np.matmul(probabilities, v, out=merged.transpose(merge[2]))
            return merged.reshape(merge[3])
        return np.matmul(probabilities, v).transpose(merge[1]).reshape(merge[2])


def plan_attention(step: FusedAttention, args: tuple[Any, ...]) -> AttentionPlan | None:
    """The plan for ``args`` (q, k and v arrays), or None where the fused step does not compute
    these inputs itself (it then runs the block's kernels in turn) or a Reshape fails."""
    block = step.block
    resolved = step.resolve(args)
    if resolved is None:
        return None
    operations, merged, inverse, context = resolved
    q, k, v = args[0], args[1], args[2]
    dtype = q.dtype
    if dtype not in FLOATS or k.dtype != dtype or v.dtype != dtype or not (q.size and k.size and v.size):
        return None
    shapes = []
    for source, ops in zip((q, k, v), operations):
        shape = source.shape
        for kind, argument in ops:
            if kind not in _SHAPING and (argument.dtype != dtype or argument.ndim > len(shape)):
                return None  # a scale of another type, or of more dimensions than it scales
            shape = shape_after(shape, [(kind, argument)])
        shapes.append(shape)
    q_shape, k_shape, v_shape = shapes
    if len(q_shape) != 4 or len(k_shape) != 4 or len(v_shape) != 4 or q_shape[-1] != k_shape[-2]:
        return None
    try:
        scores_shape = np.broadcast_shapes(q_shape[:-2], k_shape[:-2]) + (q_shape[-2], k_shape[-1])
        context_shape = np.broadcast_shapes(scores_shape[:-2], v_shape[:-2]) + (q_shape[-2], v_shape[-1])
    except ValueError:
        return None
    if scores_shape[-1] != v_shape[-2]:
        return None
    if step.scale is not None and (step.scale.dtype != dtype or not broadcasts_to(step.scale.shape, scores_shape)):
        return None
    masks = []
    for position in block.masks:
        mask = args[position]
        if type(mask) is not np.ndarray or mask.dtype != dtype or not broadcasts_to(mask.shape, scores_shape):
            return None
        masks.append([position, None if mask.flags.writeable else mask, mask.shape])
    if block.nan_fill is not None and (block.nan_fill.dtype != dtype or block.nan_fill.ndim > len(scores_shape)):
        return None
    merge = None
    if block.merge is not None:
        perm, shape_position = block.merge
        if merged is not None and scores_shape[:-2] == v_shape[:-2] and context_shape == context:
            merge = ("buffer", tuple(context_shape[axis] for axis in perm), inverse, merged)
        else:
            target = step.targets(context_shape, args[shape_position], perm)
            if target is None:
                return None
            merge = ("copy", tuple(perm), target)
    kept = []
    for position in step.shape_positions:
        target = args[position]
        if type(target) is not np.ndarray:
            return None
        kept.append([position, None if target.flags.writeable else target, target.shape, target.tobytes()])
    return AttentionPlan(dtype, operations, step.scale, block.divide, masks, kept, step.softmax, block.nan_fill, merge)


def apply_operations(value: np.ndarray, operations: list[tuple[str, Any]]) -> np.ndarray | None:
    """``value`` after resolved head operations (Reshape and Transpose as views, a Part as a
    slice, a scale multiplied); None where a scale cannot be applied (another type, more
    dimensions), which a plan's checked operations never meet."""
    for kind, argument in operations:
        if kind == "Reshape":
            value = value.reshape(argument)
        elif kind == "Transpose":
            value = value.transpose(argument)
        elif kind == "Part":
            value = value[argument]
        else:
            if argument.dtype != value.dtype or argument.ndim > value.ndim:
                return None
            value = np.multiply(value, argument)
    return value


_SHAPING = ("Reshape", "Transpose", "Part")


def shape_after(shape: tuple[int, ...], operations: list[tuple[str, Any]]) -> tuple[int, ...]:
    """The shape of an array of ``shape`` after the resolved operations (a scale keeps it)."""
    for kind, argument in operations:
        if kind == "Reshape":
            shape = tuple(argument)
        elif kind == "Transpose":
            shape = tuple(shape[axis] for axis in argument)
        elif kind == "Part":
            axis = len(argument) - 1
            shape = shape[:axis] + (argument[axis].stop - argument[axis].start,) + shape[axis + 1:]
    return shape
