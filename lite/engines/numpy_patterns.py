"""What the numpy engine's fusions share: who produces and reads each value, the checks a
matched node must pass, the Reshape targets a fused step remembers, and running a matched
block's own kernels when the fused step declines an input.

Kernels are told by their module and name (:func:`is_kernel`), so a model loads no kernel module
it does not use; the fusions import kernels only where they matched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.errors import LiteError
from lite.plan_cache import SHAPES_KEPT, PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def is_kernel(fn: Any, module: str, name: str) -> bool:
    """Whether ``fn`` is the kernel ``name`` of ``lite.ops.<module>``, told by its names: the
    fusions import no kernel module a model does not use."""
    return getattr(fn, "__module__", None) == f"lite.ops.{module}" and getattr(fn, "__qualname__", None) == name


MATMUL, RESHAPE, TRANSPOSE = ("mat_mul", "MatMul"), ("reshape", "Reshape"), ("transpose", "Transpose")


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``target`` without enlarging it."""
    if len(shape) > len(target):
        return False
    return all(size == 1 or size == wanted for size, wanted in zip(shape[::-1], target[::-1]))


class Graph:
    """Who produces and who reads each value, and where each step runs."""

    def __init__(self, steps: list[_Step], graph_outputs: set[int]) -> None:
        self.producer_of = {index: step for step in steps for index in step.outputs if index >= 0}
        self.readers_of: dict[int, list[_Step]] = {}
        for step in steps:
            for index in set(step.inputs):
                if index >= 0:
                    self.readers_of.setdefault(index, []).append(step)
        self.position = {id(step): position for position, step in enumerate(steps)}
        self.graph_outputs = graph_outputs

    def single(self, index: int) -> bool:
        """Whether ``index`` is read by one step and is not a graph output."""
        return len(self.readers_of.get(index, ())) == 1 and index not in self.graph_outputs

    def producer(self, index: int, op_type: str, inputs: int, kernel: tuple[str, str] | None = None) -> _Step | None:
        """The plain ``op_type`` step (of ``kernel``, (module, name), if given) computing
        ``index`` if ``index`` has no other reader."""
        step = self.producer_of.get(index)
        if (step is None or step.node.op_type != op_type or not plain(step, inputs) or not self.single(index)
                or (kernel is not None and not is_kernel(step.fn, *kernel))):
            return None
        return step

    def only_reader(self, index: int, op_type: str, inputs: int | None, kernel: tuple[str, str] | None,
                    first: bool = True, any_kernel: bool = False) -> _Step | None:
        """The plain ``op_type`` step (``inputs`` inputs, any number if None; of ``kernel``,
        (module, name), if given) that alone reads ``index``: as its first input, or with
        ``first`` False anywhere. ``any_kernel``: as :func:`plain`'s."""
        found = self.readers_of.get(index, [])
        if len(found) != 1 or index in self.graph_outputs:
            return None
        step = found[0]
        if (step.node.op_type != op_type
                or not plain(step, len(step.inputs) if inputs is None else inputs, any_kernel=any_kernel)
                or (kernel is not None and not is_kernel(step.fn, *kernel)) or step.inputs.count(index) != 1
                or (first and step.inputs[0] != index)):
            return None
        return step


def plain(step: _Step, inputs: int, *, any_kernel: bool = False) -> bool:
    """A standard-domain step the engine runs inline, with ``inputs`` inputs and nothing fused in.

    A fused step keeps the node of the step it replaced (a convolution chain ending in a residual
    Add is still that Add's node), so its kernel is checked too: one of ``lite.ops``' functions,
    not a fusion's callable. A later fusion that matched by op type alone took such a chain for
    a plain Add and dropped its convolutions. ``any_kernel``: the caller has checked the kernel
    itself (a product with its bias already fused in)."""
    fn = step.fn
    own_kernel = any_kernel or (inspect.isfunction(fn) and getattr(fn, "__module__", "").startswith("lite.ops."))
    return (own_kernel and not step.node.domain and step.inline and step.activation is None and step.memo is None
            and len(step.inputs) == inputs and all(i >= 0 for i in step.inputs))


def float_scalar(value: Any) -> bool:
    """Whether ``value`` is a one-element float32 or float64 array."""
    return isinstance(value, np.ndarray) and value.size == 1 and value.dtype in FLOATS


def per_channel(value: Any) -> np.ndarray | None:
    """``value`` as a vector if it is a float constant of shape (C, 1, 1) or (1, C, 1, 1): a
    per-channel operand of an image, as a folded BatchNormalization or a GroupNorm's affine
    part writes it."""
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim not in (3, 4):
        return None
    if value.shape[-2:] != (1, 1) or (value.ndim == 4 and value.shape[0] != 1):
        return None
    return value.reshape(-1)


def constant_of(step: _Step, constants: dict[int, Any]) -> tuple[int, np.ndarray] | tuple[None, None]:
    """(position, value) of the float constant among a binary step's inputs, if one is."""
    for position in (1, 0):
        value = constants.get(step.inputs[position])
        if isinstance(value, np.ndarray) and value.dtype in FLOATS and step.inputs[1 - position] not in constants:
            return position, value
    return None, None


def ones(length: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of ones (row sums as products), the one lite.ops.reduce keeps."""
    from lite.ops.reduce import ones as kept_ones

    return kept_ones(length, dtype)


def run_in_turn(block: list[_Step], x_index: int, x: Any, constants: dict[int, Any], allocate: Callable) -> Any:
    """A block's own kernels one after the other, on ``x``."""
    return run_steps(block, {x_index: x}, constants, allocate)


def run_steps(block: list[_Step], values: dict[int, Any], constants: dict[int, Any], allocate: Callable) -> Any:
    """A block's own kernels one after the other, from ``values`` (its inputs by index, filled in
    with what the steps compute): the last step's output."""
    return run_block(block, values, constants, allocate)


def run_block(block: list[_Step], values: dict[int, Any], constants: dict[int, Any], allocate: Callable) -> Any:
    """:func:`run_steps` keeping every output of a step with several (a Split's parts)."""
    for step in block:
        args = [values[i] if i in values else constants.get(i) for i in step.inputs]
        if step.wants_allocate:
            result = step.fn(*args, allocate=allocate, **step.keywords)
        else:
            result = step.fn(*args, **step.keywords)
        values.update(zip(step.outputs, result if type(result) is tuple else (result,)))
    return values[block[-1].outputs[0]]


def in_turn(block: list[_Step], x_index: int, constants: dict[int, Any]) -> Callable[[Any, Callable], Any]:
    """:func:`run_in_turn` of ``block`` as a fused kernel's ``fallback(x, allocate)``, for the
    inputs the kernel does not handle."""
    return lambda x, allocate: run_in_turn(block, x_index, x, constants, allocate)


class ReshapeTargets:
    """What Reshape makes of a tensor's shape for a shape tensor, remembered per both (a server
    sees a few sequence lengths), so that a fused step reshapes a view without running Reshape's
    checks on every call."""

    def __init__(self) -> None:
        from lite.ops.reshape import Reshape

        self.reshape = Reshape
        # A fused step reshapes a few tensors per input shape.
        self.known: PlanCache[tuple[np.ndarray, tuple[int, ...]]] = PlanCache(entries=4 * SHAPES_KEPT)

    def __call__(self, shape: tuple[int, ...], target: Any, perm: list[int] | None = None) -> tuple[int, ...] | None:
        """The shape Reshape gives a tensor of ``shape`` (permuted by ``perm``) for ``target``;
        None where ``target`` is not a 1-D int64 array or Reshape fails."""
        if type(target) is not np.ndarray or target.dtype != np.int64 or target.ndim != 1:
            return None
        # A read-only shape tensor (a constant, or a value the engine remembers from shapes) is
        # known by its identity (the entry holds it: its id is not reused while it is a key).
        by_identity = not target.flags.writeable
        key = (shape, None if perm is None else tuple(perm), id(target) if by_identity else target.tobytes())
        known = self.known.get(key)
        if known is not None and (not by_identity or known[0] is target):
            return known[1]
        if perm is not None:
            if sorted(perm) != list(range(len(shape))):
                return None
            shape = tuple(shape[axis] for axis in perm)
        try:
            result = self.reshape(np.empty(shape, np.uint8), target).shape
        except LiteError:
            return None
        self.known.put(key, (target, result))
        return result
