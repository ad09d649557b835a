"""The numpy engine's PoolFormer token mixer: a 3x3 average pool (stride 1, padding 1, padded cells
not counted) and the Sub of its input after it, as one step::

    x ─┬─► AveragePool(3x3, stride 1, pad 1, count_include_pad 0) ─► Sub(·, x) ─► y
       └──────────────────────────────────────────────────────────────┘

The average is the AveragePool kernel's own path for this window
(:func:`lite.ops.average_pool.same_size_average`: the window summed separably, by shifted
slices of a zero-padded copy, divided by each window's count of real cells); the step then
subtracts ``x`` in place, saving the Sub's call and its new array. Where the difference alone
goes on through PoolFormer's layer scale (a Mul by a (C, 1, 1) constant) and its residual Add,
those two run in place in the same step, the same arithmetic as their kernels'. An AveragePool
of this kind without the Sub runs the kernel's path alone. Other inputs run the nodes' own
kernels.

On a small C-contiguous map (up to 64 pixels: PoolFormer's last three stages on 64x64 images),
the average less x is instead one matrix product: each image's (C, H·W) rows times the
(H·W, H·W) matrix of the window weights, ``kron(T_H, T_W) - I`` with ``T`` a band of ones divided
by each window's count along that axis. There the shifted slices ran a numpy loop per row of 2 to
8 cells, ten calls for under 10k values (51-57 µs on 4x4 and 2x2 maps against 7 for the product);
the product rounds differently (float32 rounding of a nine-term sum), nothing more.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, Graph, plain, run_steps

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

def fuse_pool_mixer(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each 3x3 same-size average pool (and the Sub of its input after it) as one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for pool in steps:
        if pool.node.op_type != "AveragePool" or not plain(pool, 1) or not _same_size_3x3(pool.attributes):
            continue
        x = pool.inputs[0]
        sub = graph.only_reader(pool.outputs[0], "Sub", 2, None)
        if sub is not None and sub.inputs[1] == x:
            block, inputs, scale = [pool, sub], [x], None
            residual = _scaled_residual(sub, graph, constants)
            if residual is not None:
                mul, add, scale, other = residual
                block += [mul, add]
                inputs.append(other)
            fused[id(block[-1])] = replace(
                block[-1], fn=PoolMixer(block, inputs, True, constants, scale), inputs=inputs, attributes={},
                output_count=None, wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
            dropped.update(id(step) for step in block[:-1])
        else:
            fused[id(pool)] = replace(
                pool, fn=PoolMixer([pool], [x], False, constants), attributes={}, output_count=None,
                wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _scaled_residual(sub: _Step, graph: Graph, constants: dict[int, Any]):
    """(Mul, Add, the per-channel scale, the other addend) where the Sub's result alone goes
    through a Mul by a (C, 1, 1) constant (PoolFormer's layer scale) and then an Add (the
    residual connection), or None."""
    mul = graph.only_reader(sub.outputs[0], "Mul", 2, None, first=False)
    if mul is None:
        return None
    scale = constants.get(mul.inputs[1] if mul.inputs[0] == sub.outputs[0] else mul.inputs[0])
    if not isinstance(scale, np.ndarray) or scale.dtype not in FLOATS or scale.ndim != 3 or scale.shape[1:] != (1, 1):
        return None
    add = graph.only_reader(mul.outputs[0], "Add", 2, None, first=False)
    if add is None:
        return None
    other = add.inputs[1] if add.inputs[0] == mul.outputs[0] else add.inputs[0]
    if other in constants or graph.position[id(add)] < graph.position[id(mul)]:
        return None
    return mul, add, scale, other


def _same_size_3x3(attributes: dict[str, Any]) -> bool:
    return (_listed(attributes.get("kernel_shape", [])) == [3, 3]
            and _listed(attributes.get("strides", [1, 1])) == [1, 1]
            and _listed(attributes.get("pads", [0, 0, 0, 0])) == [1, 1, 1, 1]
            and _listed(attributes.get("dilations", [1, 1])) == [1, 1]
            and attributes.get("count_include_pad", 0) == 0 and attributes.get("ceil_mode", 0) == 0
            and attributes.get("auto_pad", "NOTSET") == "NOTSET")


def _listed(value: Any) -> list | None:
    """An ints attribute as a list; None for anything else (a damaged file's scalar or string),
    which the pooling kernel then refuses with its own typed error."""
    return list(value) if isinstance(value, (list, tuple, np.ndarray)) else None


class PoolMixer:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], inputs: list[int], subtract: bool, constants: dict[int, Any],
                 scale: np.ndarray | None = None) -> None:
        # Imported here, where a model has the pattern: loading the engine loads no kernel module.
        from lite.ops.average_pool import same_size_average

        self.same_size_average = same_size_average
        self.block = block
        self.inputs = inputs  # x, then the residual where the block ends in the Add
        self.subtract = subtract
        self.scale = scale
        self.constants = constants

    def __call__(self, x: Any, *residual: Any, allocate: Callable = np.empty) -> Any:
        if (type(x) is not np.ndarray or x.dtype not in FLOATS or x.ndim != 4 or 0 in x.shape
                or (residual and (type(residual[0]) is not np.ndarray or residual[0].shape != x.shape
                                  or residual[0].dtype != x.dtype or self.scale.dtype != x.dtype
                                  or self.scale.shape[0] != x.shape[1]))):
            return run_steps(self.block, dict(zip(self.inputs, (x, *residual))), self.constants, allocate)
        batch, channels, height, width = x.shape
        if height * width <= _PRODUCT_MAX_PIXELS and x.flags.c_contiguous:
            weights = _window_weights(height, width, self.subtract, x.dtype)
            total = np.matmul(x.reshape(batch * channels, height * width), weights).reshape(x.shape)
        else:
            total = self.same_size_average(x, False)
            if self.subtract:
                total -= x
        if residual:  # the Mul's and the Add's arithmetic, in place
            total *= self.scale
            total += residual[0]
        return total


# Maps up to this many pixels take the window-weight product (its cost grows with the square of the
# pixels: 12 µs for 64 channels of 8x8, 160 for 32 of 16x16, where the shifted slices take 50-90).
_PRODUCT_MAX_PIXELS = 64


@functools.lru_cache(maxsize=64)
def _window_weights(height: int, width: int, subtract: bool, dtype: np.dtype) -> np.ndarray:
    """The (H·W, H·W) matrix taking an image's row-major pixels to their 3x3 window averages
    (padded cells not counted), less the identity with ``subtract``; computed in float64,
    read-only."""

    def band(size: int) -> np.ndarray:
        ones = np.eye(size) + np.eye(size, k=1) + np.eye(size, k=-1)
        return ones / ones.sum(axis=0)  # column j: the cells of window j, over their count

    weights = np.kron(band(height), band(width))
    if subtract:
        weights -= np.eye(height * width)
    weights = weights.astype(dtype)
    weights.flags.writeable = False
    return weights
