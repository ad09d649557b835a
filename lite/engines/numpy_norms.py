"""The numpy engine's RMS normalization fusion: an RMSNorm written as elementwise nodes, as one step.

torch.export writes T5's and Llama's RMSNorm as seven nodes, each a kernel call on a few
thousand values::

    x ─┬─► Pow(·, 2) ─► ReduceMean(last axis, keepdims) ─► Add(ε) ─► Sqrt ─► Reciprocal ─┐
       └───────────────────────────────────────────────────────────────────────────────── Mul ─► [Mul(γ)] ─► y

becomes one step computing ``x · 1/sqrt(mean(x²) + ε) [· γ]`` with the same numpy operations in
the same order (lite.ops.arithmetic's square for Pow(·, 2), lite.ops.reduce's mean over the last
axis), the intermediates written in place. ε and γ are constants of x's float type; every node
but the last is read by the next alone and is not a graph output. Inputs the step does not
handle (another element type, a ReduceMean axis that is not the last) run the original kernels
one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import (
    FLOATS,
    Graph,
    broadcasts_to,
    constant_of,
    ones,
    plain,
    run_in_turn,
)
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_rms_norm(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every RMSNorm chain (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "Pow" or not plain(step, 2):
            continue
        match, _reason = match_rms_norm(step, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match[0]):
            continue
        block, x, axis, epsilon, weight = match
        last = block[-1]
        fused[id(last)] = replace(
            last, fn=FusedRMSNorm(block, x, axis, epsilon, weight, constants), inputs=[x], outputs=[last.outputs[0]],
            attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
            wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
        dropped.update(id(s) for s in block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def match_rms_norm(power: _Step, graph: Graph, constants: dict[int, Any]):
    """(steps, x, the mean's axis, ε, γ or None) of the RMSNorm starting at ``power``, or None;
    and the reason it is not one."""
    exponent = constants.get(power.inputs[1])
    x = power.inputs[0]
    if not isinstance(exponent, np.ndarray) or exponent.size != 1 or exponent.dtype not in FLOATS or x in constants:
        return None, "not a square of a computed tensor"
    if float(exponent.reshape(())) != 2.0:
        return None, "not a square"
    mean = graph.only_reader(power.outputs[0], "ReduceMean", None, None)
    if mean is None or mean.attributes.get("keepdims", 1) != 1 or len(mean.inputs) > 2:
        return None, "the square is not averaged (ReduceMean, keepdims) alone"
    axes = constants.get(mean.inputs[1]) if len(mean.inputs) == 2 else mean.attributes.get("axes")
    if axes is None or np.asarray(axes).size != 1:
        return None, "the mean is not over one constant axis"
    axis = int(np.asarray(axes).reshape(()))
    add = graph.only_reader(mean.outputs[0], "Add", 2, None)
    position, epsilon = constant_of(add, constants) if add is not None else (None, None)
    if epsilon is None or epsilon.size != 1 or add.inputs[1 - position] != mean.outputs[0]:
        return None, "no constant ε added to the mean"
    sqrt = graph.only_reader(add.outputs[0], "Sqrt", 1, None)
    reciprocal = graph.only_reader(sqrt.outputs[0], "Reciprocal", 1, None) if sqrt is not None else None
    if reciprocal is None:
        return None, "not the reciprocal of a square root"
    scale = graph.only_reader(reciprocal.outputs[0], "Mul", 2, None, first=False)
    if scale is None or sorted(scale.inputs) != sorted([x, reciprocal.outputs[0]]):
        return None, "x is not multiplied by the reciprocal"
    block = [power, mean, add, sqrt, reciprocal, scale]
    weight = None
    gain = graph.only_reader(scale.outputs[0], "Mul", 2, None, first=False)
    if gain is not None:
        position, value = constant_of(gain, constants)
        if value is not None and gain.inputs[1 - position] == scale.outputs[0]:
            weight = value
            block.append(gain)
    dtypes = {exponent.dtype, epsilon.dtype} | ({weight.dtype} if weight is not None else set())
    if len(dtypes) != 1:
        return None, "ε and γ are not of one float type"
    positions = {id(step): graph.position[id(step)] for step in block}
    if max(positions.values()) != positions[id(block[-1])]:
        return None, "the chain's last node does not run last"
    return (block, x, axis, epsilon, weight), ""


class FusedRMSNorm:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], x: int, axis: int, epsilon: np.ndarray, weight: np.ndarray | None,
                 constants: dict[int, Any]) -> None:
        self.block = block
        self.x = x
        self.axis = axis
        self.epsilon = epsilon
        self.weight = weight
        self.dtype = epsilon.dtype
        self.constants = constants
        # x's shape -> (rows shape, ones, the length, the mean's shape, γ as a whole array or
        # None), or None where the steps run in turn (see _plan).
        self.plans: PlanCache[tuple[Any, ...] | None] = PlanCache()

    def __call__(self, x: Any, allocate: Callable = np.empty) -> np.ndarray:
        if type(x) is np.ndarray and x.dtype is self.dtype and x.flags.c_contiguous:
            plan = self.plans.get(x.shape, _UNPLANNED)
            if plan is _UNPLANNED:
                plan = self._plan(x)
            if plan is not None:
                rows, ones_row, length, column, weight = plan
                # The steps below, each check made once for this shape and γ as a whole array.
                square = np.multiply(x, x)
                mean = np.matmul(square.reshape(rows), ones_row)
                np.divide(mean, length, out=mean)
                mean = mean.reshape(column)
                np.add(mean, self.epsilon, out=mean)
                np.sqrt(mean, out=mean)
                np.reciprocal(mean, out=mean)
                y = np.multiply(x, mean)
                if weight is not None:
                    np.multiply(y, weight, out=y)
                return y
        return self._checked(x, allocate)

    def _plan(self, x: np.ndarray) -> tuple[Any, ...] | None:
        """What __call__ needs for inputs of ``x``'s shape, or None where _checked would not
        compute them itself."""
        plan, nbytes = None, 0
        if (x.ndim and x.size and self.axis in (-1, x.ndim - 1) and self.epsilon.ndim <= x.ndim
                and (self.weight is None or broadcasts_to(self.weight.shape, x.shape))
                and not (self.epsilon.ndim == x.ndim and self.epsilon.shape != (1,) * x.ndim)):
            from lite.ops._helpers import full_operand_within

            length = x.shape[-1]
            weight = None
            if self.weight is not None:
                weight, nbytes = full_operand_within(self.weight, x.shape, self.plans)
            plan = ((x.size // length, length), ones(length, x.dtype), x.dtype.type(length), x.shape[:-1] + (1,), weight)
        return self.plans.put(x.shape, plan, nbytes)

    def _checked(self, x: Any, allocate: Callable) -> np.ndarray:
        """The fused computation with every check made on this call."""
        if (type(x) is not np.ndarray or x.dtype != self.dtype or not x.ndim or not x.size
                or self.axis not in (-1, x.ndim - 1) or not x.flags.c_contiguous
                or (self.weight is not None and not broadcasts_to(self.weight.shape, x.shape))
                or self.epsilon.ndim > x.ndim):
            return run_in_turn(self.block, self.x, x, self.constants, allocate)
        length = x.shape[-1]
        square = np.multiply(x, x)
        # ReduceMean's last-axis path: row sums as a product with ones, then the division.
        mean = np.matmul(square.reshape(-1, length), ones(length, x.dtype))
        np.divide(mean, x.dtype.type(length), out=mean)
        mean = mean.reshape(x.shape[:-1] + (1,))
        if self.epsilon.ndim == mean.ndim and self.epsilon.shape != (1,) * mean.ndim:
            return run_in_turn(self.block, self.x, x, self.constants, allocate)
        np.add(mean, self.epsilon, out=mean)
        np.sqrt(mean, out=mean)
        np.reciprocal(mean, out=mean)
        y = np.multiply(x, mean)
        if self.weight is not None:
            np.multiply(y, self.weight, out=y)
        return y


_UNPLANNED = object()  # a plans entry not worked out yet


# -- residual connection and LayerNormalization ---------------------------------------------------


def fuse_residual_layer_norm(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each LayerNormalization of a sum read by nothing else (a post-norm
    transformer's residual connection, BERT's) computed with that Add in one step::

        a ─► Add(a, b) ─► LayerNormalization(·, γ, β) ─► y      becomes      a, b ─► Add+LayerNorm ─► y

    The sum is numpy's add of the two arrays when they share a float type, else the Add kernel.
    Every other LayerNormalization by constant parameters then becomes a :class:`ConstantLayerNorm`
    (:func:`keep_layer_norm_rows`).
    """
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for norm in steps:
        if (norm.node.op_type != "LayerNormalization" or norm.node.domain or not norm.inline or norm.activation
                or norm.memo is not None or not norm.inputs or min(norm.inputs) < 0 or len(norm.outputs) != 1):
            continue
        add = graph.producer(norm.inputs[0], "Add", 2)
        if add is None or id(add) in dropped or norm.inputs[0] in norm.inputs[1:]:
            continue
        fused[id(norm)] = replace(
            norm, fn=ResidualLayerNorm(add.fn, norm.fn, _normalizer(norm, constants)),
            inputs=add.inputs + norm.inputs[1:], wants_allocate=True, memo=None, memo_sources=[])
        dropped.add(id(add))
    return keep_layer_norm_rows([fused.get(id(step), step) for step in steps if id(step) not in dropped], constants)


def _normalizer(norm: _Step, constants: dict[int, Any]):
    """A LastAxisNormalizer for ``norm``, a LayerNormalization of Y alone over the last axis in
    float32 statistics by constant Scale and B; None for any other."""
    from lite.ops.layer_normalization import LastAxisNormalizer

    attributes = norm.attributes
    if (norm.output_count != 1 or attributes.get("axis", -1) != -1 or attributes.get("stash_type", 1) != 1
            or len(norm.inputs) not in (2, 3)):
        return None
    scale = constants.get(norm.inputs[1])
    bias = constants.get(norm.inputs[2]) if len(norm.inputs) == 3 else None
    if not isinstance(scale, np.ndarray) or (len(norm.inputs) == 3 and not isinstance(bias, np.ndarray)):
        return None
    return LastAxisNormalizer(scale, bias, attributes.get("epsilon", 1e-5))


class ResidualLayerNorm:
    """The fused step's kernel: the sum, then the LayerNormalization kernel on it."""

    def __init__(self, add: Callable, norm: Callable, normalizer: Callable | None = None) -> None:
        # Imported here, where a model has the pattern: loading the engine loads no kernel module.
        from lite.ops.layer_normalization import normalize_last_axis

        self.add = add
        self.norm = norm
        self.normalize_last_axis = normalize_last_axis
        # The kernel's last-axis path for the node's own constant parameters (see _normalizer).
        self.normalizer = normalizer

    def __call__(self, a: Any, b: Any, *parameters: Any, allocate: Callable = np.empty, **attributes: Any) -> Any:
        if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.dtype in FLOATS:
            total = np.add(a, b)
            if self.normalizer is not None and total.dtype is _FLOAT32 and len(parameters) in (1, 2):
                # The sum is a temporary of this step: normalized in place.
                y = self.normalizer(total, parameters[0], parameters[1] if len(parameters) == 2 else None, True)
                if y is not None:
                    return y
            if (total.dtype == np.float32 and attributes.get("output_count") == 1 and attributes.get("stash_type", 1) == 1
                    and attributes.get("axis", -1) in (-1, total.ndim - 1) and total.ndim and total.size
                    and total.flags.c_contiguous and len(parameters) in (1, 2)):
                # The kernel's path for Y alone over the last axis, into the sum (a temporary of this step).
                y = self.normalize_last_axis(total, parameters[0], parameters[1] if len(parameters) == 2 else None,
                                             attributes.get("epsilon", 1e-5), overwrite=True)
                if y is not None:
                    return y
        else:
            total = self.add(a, b, allocate=allocate)
        return self.norm(total, *parameters, **attributes)


def keep_layer_norm_rows(steps: list[_Step], constants: dict[int, Any]) -> list[_Step]:
    """``steps`` with each LayerNormalization of Y alone over the last axis, by constant Scale
    and B, computed by :class:`ConstantLayerNorm` (a pre-norm transformer's, GPT-2's: the sum
    is read by the next residual Add too, so it stays a node of its own)."""
    kept = []
    for norm in steps:
        if (norm.node.op_type == "LayerNormalization" and not norm.node.domain and norm.inline and not norm.activation
                and norm.memo is None and min(norm.inputs, default=-1) >= 0 and norm.prepared is None):
            normalizer = _normalizer(norm, constants)
            if normalizer is not None:
                norm = replace(norm, fn=ConstantLayerNorm(norm.fn, norm.keywords, normalizer), attributes={},
                               output_count=None, memo=None, memo_sources=[])
        kept.append(norm)
    return kept


class ConstantLayerNorm:
    """The step's kernel: the LayerNormalization kernel's last-axis path for its constant
    parameters on a C-contiguous float32 input (LastAxisNormalizer), the kernel otherwise."""

    def __init__(self, kernel: Callable, keywords: dict[str, Any], normalizer: Callable) -> None:
        self.kernel = kernel
        self.keywords = keywords
        self.normalizer = normalizer

    def __call__(self, x: Any, *parameters: Any) -> Any:
        if type(x) is np.ndarray and x.dtype is _FLOAT32 and len(parameters) in (1, 2):
            y = self.normalizer(x, parameters[0], parameters[1] if len(parameters) == 2 else None)
            if y is not None:
                return y
        return self.kernel(x, *parameters, **self.keywords)


_FLOAT32 = np.dtype(np.float32)
