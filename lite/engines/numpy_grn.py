"""The numpy engine's global response normalization (ConvNeXt V2's GRN) as one step.

On a channels-last ``(N, H, W, C)`` activation, torch.export writes GRN as eight nodes::

    x ─┬─► ReduceL2(axes H, W) ─► g ─┬─► ReduceMean(axis C) ─► Add(eps) ─┐
       │                             └───────────────────────────────► Div ─► n
       ├─────────────────────────────────────────────────────────────► Mul(x, n) ─► Mul(gamma) ─► Add(beta) ─┐
       └──────────────────────────────────────────────────────────────────────────────────────────────── Add ─► y

that is ``y = gamma·(x·n) + beta + x``: four passes over the activation, each into a new array,
after the reduction. The fused step makes two: ``y = x·(gamma·n + 1) + beta``, the per-channel
factor ``gamma·n + 1`` worked out on the (N, C) norms first. That reorders float32 roundings of
each element (a few ulp), nothing else; the norms are the sums of squares over the image's pixels
(one einsum, no squared copy), their mean ReduceMean's sum divided by the count.

Where the result goes on alone into a linear layer (ConvNeXt V2's fc2: a MatMul by constant
weights ``W``, its bias ``b`` fused or not), the step takes it in::

    (x·f + beta) @ W + b  =  x @ (f[:, None]·W)  +  (beta @ W + b)

``beta @ W + b`` computed once at load (in float64, stored in the weights' type), the weights'
(C, N) rows scaled per image on each call: on the first stage's 256 pixels of 96 channels into
24 outputs that replaces two passes over x (45 µs against 21 for the pair, measured alone). With
fewer pixels than outputs (the last stages) scaling x is the cheaper side, and the step computes
``x·f + beta`` and then the layer's own product and bias. The step's result is a fresh product
that a product epilogue (lite.engines.numpy_epilogue: the layer scale, the residual Add) updates
in place, as it does a MatMul's.

Matched when every intermediate is read by the block alone, gamma, beta and eps are float
constants of x's type that do not enlarge the norms' shape, the reduced axes are the spatial ones
(1 to rank - 2) and the mean's the last. Other inputs (another dtype or rank, a non-contiguous x)
run the nodes' own kernels in turn.
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
    float_scalar,
    plain,
    run_steps,
)

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_grn(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each global response normalization (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "ReduceL2" or not plain(step, 2):
            continue
        match = _match(step, graph, constants)
        if match is None or any(id(s) in dropped or id(s) in fused for s in match.block):
            continue
        linear = _linear_reader(match.block[-1], graph, constants)
        inputs = [match.x]
        if linear is not None and match.absorb(linear, constants):
            inputs += linear.inputs[1:]
        last = match.block[-1]
        fused[id(last)] = replace(
            last, fn=match, inputs=inputs, outputs=[last.outputs[0]], attributes={}, output_count=None,
            activation=None, kernel_applies_activation=False, wants_allocate=True, prepare=None, prepared=None,
            memo=None, memo_sources=[])
        dropped.update(id(s) for s in match.block[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _axes(step: _Step, constants: dict[int, Any]) -> list[int] | None:
    """The constant axes of a reduction that keeps its dimensions, or None."""
    axes = constants.get(step.inputs[1])
    if (not isinstance(axes, np.ndarray) or axes.dtype.kind != "i" or axes.ndim != 1 or not axes.size
            or step.attributes.get("keepdims", 1) != 1):
        return None
    return axes.tolist()


def _other(step: _Step | None, index: int) -> int | None:
    """The input of a binary step that is not ``index`` (which it reads once), or None."""
    if step is None or step.inputs.count(index) != 1:
        return None
    return step.inputs[1] if step.inputs[0] == index else step.inputs[0]


def _match(reduce_l2: _Step, graph: Graph, constants: dict[int, Any]) -> GlobalResponseNorm | None:
    """The :class:`GlobalResponseNorm` from ``reduce_l2`` on, or None."""
    x, norms = reduce_l2.inputs[0], reduce_l2.outputs[0]
    spatial = _axes(reduce_l2, constants)
    readers = graph.readers_of.get(norms, [])
    if spatial is None or x in constants or len(readers) != 2 or norms in graph.graph_outputs:
        return None
    mean = next((s for s in readers if s.node.op_type == "ReduceMean"), None)
    if mean is None or not plain(mean, 2) or mean.inputs[0] != norms or _axes(mean, constants) is None:
        return None
    shifted = graph.only_reader(mean.outputs[0], "Add", 2, None, first=False)
    eps = constants.get(_other(shifted, mean.outputs[0])) if shifted is not None else None
    divide = graph.only_reader(shifted.outputs[0], "Div", 2, None, first=False) if float_scalar(eps) else None
    if divide is None or divide.inputs != [norms, shifted.outputs[0]] or divide not in readers:
        return None
    block = [reduce_l2, mean, shifted, divide]
    scaled = graph.only_reader(divide.outputs[0], "Mul", 2, None, first=False)
    if _other(scaled, divide.outputs[0]) != x:
        return None
    operands, chain = [], [scaled]
    current = scaled
    for op_type in ("Mul", "Add"):  # gamma, then beta
        step = graph.only_reader(current.outputs[0], op_type, 2, None, first=False)
        position, value = constant_of(step, constants) if step is not None else (None, None)
        if position is None or value.ndim > 4 or step.inputs[1 - position] != current.outputs[0]:
            return None
        operands.append(value)
        chain.append(step)
        current = step
    residual = graph.only_reader(current.outputs[0], "Add", 2, None, first=False)
    if _other(residual, current.outputs[0]) != x:
        return None
    block += [*chain, residual]
    gamma, beta = operands
    if len({gamma.dtype, beta.dtype, eps.dtype}) != 1:
        return None
    return GlobalResponseNorm(block, x, spatial, _axes(mean, constants), gamma, beta, eps.reshape(()), constants)


def _linear_reader(last: _Step, graph: Graph, constants: dict[int, Any]) -> _Step | None:
    """The MatMul (its bias Add fused or not) by constant 2-D weights that alone reads the block's
    result, as A; or None."""
    from lite.engines.numpy_patterns import MATMUL, is_kernel

    matmul = graph.only_reader(last.outputs[0], "MatMul", None, None, any_kernel=True)  # kernel checked below
    if matmul is None or not (is_kernel(matmul.fn, *MATMUL) or _is_matmul_add(matmul.fn)) or matmul.keywords:
        return None
    weights = constants.get(matmul.inputs[1]) if len(matmul.inputs) in (2, 3) else None
    bias = constants.get(matmul.inputs[2]) if len(matmul.inputs) == 3 else None
    if (not isinstance(weights, np.ndarray) or weights.ndim != 2 or (len(matmul.inputs) == 3 and (
            not isinstance(bias, np.ndarray) or bias.shape != weights.shape[1:] or bias.dtype != weights.dtype))):
        return None
    return matmul


def _is_matmul_add(fn: Any) -> bool:
    """Whether ``fn`` is a MatMul with its bias fused (lite.engines.numpy_fusions._MatMulAdd, which
    imports this module), told by its class's names."""
    kind = type(fn)
    return kind.__module__ == "lite.engines.numpy_fusions" and kind.__qualname__ == "_MatMulAdd"


class GlobalResponseNorm:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], x: int, spatial: list[int], channel: list[int], gamma: np.ndarray,
                 beta: np.ndarray, eps: np.ndarray, constants: dict[int, Any]) -> None:
        self.block = block
        self.x = x
        self.spatial, self.channel = spatial, channel
        self.gamma, self.beta, self.eps = gamma, beta, eps
        self.dtype = gamma.dtype
        self.constants = constants
        self.fitting: dict[tuple[int, int], bool] = {}  # (rank, channels) -> whether the axes and operands fit
        # The absorbed linear layer's weights and bias (or None), and beta @ W + bias.
        self.weights: np.ndarray | None = None
        self.bias: np.ndarray | None = None
        self.shift: np.ndarray | None = None

    # The result is a new array nobody else reads: a product epilogue (lite.engines.numpy_epilogue)
    # may update it in place, as it does a MatMul's.
    fresh_product = True

    def absorb(self, matmul: _Step, constants: dict[int, Any]) -> bool:
        """Take in the linear layer reading the block (see the module docstring), if its weights
        are of the block's type and beta is per channel of their rows."""
        weights = constants[matmul.inputs[1]]
        channels = weights.shape[0]
        beta = self.beta
        if (weights.dtype != self.dtype or any(size != 1 for size in beta.shape[:-1])
                or beta.shape[-1:] not in ((), (1,), (channels,))):
            return False
        shift = np.broadcast_to(beta.reshape(-1), (channels,)).astype(np.float64) @ weights.astype(np.float64)
        if len(matmul.inputs) == 3:
            self.bias = constants[matmul.inputs[2]]
            shift += self.bias
        self.block.append(matmul)
        self.weights, self.shift = weights, shift.astype(self.dtype)
        self.shift.flags.writeable = False
        return True

    def _fits(self, rank: int, channels: int) -> bool:
        """Whether the block's axes are the spatial and channel axes of a rank-``rank``
        channels-last array, and gamma and beta per channel (or scalars) of its norms."""
        if rank < 3:
            return False
        spatial = sorted(axis % rank for axis in self.spatial if -rank <= axis < rank)
        channel = [axis % rank for axis in self.channel if -rank <= axis < rank]
        norms = (1,) * (rank - 1) + (channels,)
        return (spatial == list(range(1, rank - 1)) and len(spatial) == len(self.spatial) and channel == [rank - 1]
                and len(self.channel) == 1 and broadcasts_to(self.gamma.shape, norms)
                and broadcasts_to(self.beta.shape, norms) and (self.weights is None or self.weights.shape[0] == channels))

    def __call__(self, x: Any, *linear: Any, allocate: Callable = np.empty) -> Any:
        if (type(x) is not np.ndarray or x.dtype != self.dtype or x.dtype not in FLOATS or not x.flags.c_contiguous
                or not x.size or (linear and linear[0] is not self.weights)):
            return run_steps(self.block, {self.x: x}, self.constants, allocate)
        key = (x.ndim, x.shape[-1])
        fits = self.fitting.get(key)
        if fits is None:
            fits = self.fitting[key] = self._fits(*key)
        if not fits:
            return run_steps(self.block, {self.x: x}, self.constants, allocate)
        batch, channels = x.shape[0], x.shape[-1]
        rows = x.reshape(batch, -1, channels)
        norms = np.sqrt(np.einsum("npc,npc->nc", rows, rows)).reshape((batch,) + (1,) * (x.ndim - 2) + (channels,))
        mean = np.add.reduce(norms, axis=-1, keepdims=True)
        np.divide(mean, self.dtype.type(channels), out=mean)
        np.add(mean, self.eps, out=mean)
        factor = np.divide(norms, mean)
        np.multiply(factor, self.gamma, out=factor)
        np.add(factor, self.dtype.type(1), out=factor)
        weights = self.weights
        if weights is not None and weights.shape[1] < rows.shape[1]:
            # (x·f + beta) @ W + b = x @ (f·W) + (beta @ W + b): the weights' rows scaled per image,
            # (C, N) values where x·f + beta are two passes over (pixels, C).
            scaled = allocate((batch, channels, weights.shape[1]), x.dtype)
            np.multiply(factor.reshape(batch, channels, 1), weights, out=scaled)
            y = allocate((batch, rows.shape[1], weights.shape[1]), x.dtype)
            np.matmul(rows, scaled, out=y)
            np.add(y, self.shift, out=y)
            return y.reshape(x.shape[:-1] + weights.shape[1:])
        y = allocate(x.shape, x.dtype)
        np.multiply(x, factor, out=y)
        np.add(y, self.beta, out=y)
        if weights is None:
            return y
        # Fewer pixels than outputs (the last stages): scaling x is the cheaper side; the layer's own arithmetic.
        product = np.matmul(y, weights)
        return product if self.bias is None else np.add(product, self.bias, out=product)
