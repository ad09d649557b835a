"""The numpy engine's constant Pad folded into the MaxPool that alone reads it::

    x ─► Pad(constant v, spatial pads) ─► MaxPool(no pads) ─► y     becomes     x ─► MaxPool(pads of v) ─► y

BiT's stem (a Pad of 0 on every side before a 3x3 stride-2 pool) and HGNetV2's (a Pad of 0
after each spatial axis before a 2x2 stride-1 pool) write the pair. The pool's windows over the
padded tensor are its windows over ``x`` with the Pad's amounts as pads whose cells hold ``v``
(MaxPool's own padding never wins a max; this one counts), and the ceil-mode overhang past both
still never counts: :func:`lite.ops._shifted_max.shifted_max_2d` computes that on ``x``, and the
padded tensor (a copy of the whole map) is never built. The same
cells, the same maxima: the result is the two nodes' exactly. With ``ceil_mode`` the last window
must start inside the input and its begin pads, which the Pad's end pads no longer are: a shape
where that drops a window, and any input the path does not take, run the two nodes' kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import FLOATS, Graph, is_kernel, plain, run_steps
from lite.errors import LiteError
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

_UNKNOWN = object()  # a geometries entry not worked out yet


def fuse_pad_max_pool(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each constant spatial Pad and the unpadded MaxPool alone reading it as one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for pad in steps:
        if pad.node.op_type != "Pad" or not is_kernel(pad.fn, "pad", "Pad") or len(pad.inputs) not in (2, 3):
            continue
        if not plain(pad, len(pad.inputs)) or pad.keywords.get("mode", "constant") != "constant":
            continue
        amounts, value = _spatial_pads(pad, constants)
        if amounts is None:
            continue
        pool = graph.only_reader(pad.outputs[0], "MaxPool", 1, ("max_pool", "MaxPool"))
        if pool is None or not _unpadded(pool.keywords):
            continue
        fused[id(pool)] = replace(
            pool, fn=PaddedMaxPool([pad, pool], amounts, value, constants), inputs=[pad.inputs[0]], attributes={},
            output_count=None, wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
        dropped.add(id(pad))
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _spatial_pads(pad: _Step, constants: dict[int, Any]) -> tuple[list[int] | None, Any]:
    """([top, left, bottom, right], the pad value or None for 0) of a Pad of an image's two
    spatial axes by constant, non-negative amounts and a constant scalar, or (None, None)."""
    amounts = constants.get(pad.inputs[1])
    value = constants.get(pad.inputs[2]) if len(pad.inputs) == 3 else None
    if (not isinstance(amounts, np.ndarray) or amounts.dtype.kind not in "iu" or amounts.shape != (8,)
            or len(pad.inputs) == 3 and (not isinstance(value, np.ndarray) or value.size != 1)):
        return None, None
    amounts = [int(a) for a in amounts]
    if amounts[0] or amounts[1] or amounts[4] or amounts[5] or min(amounts) < 0:
        return None, None
    return [amounts[2], amounts[3], amounts[6], amounts[7]], value


def _unpadded(keywords: dict[str, Any]) -> bool:
    """A single-output MaxPool with no pads of its own."""
    pads = keywords.get("pads")
    return (keywords.get("output_count", 1) == 1 and keywords.get("auto_pad", "NOTSET") == "NOTSET"
            and (pads is None or isinstance(pads, (list, tuple)) and not any(pads)))


class PaddedMaxPool:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: list[_Step], amounts: list[int], value: Any, constants: dict[int, Any]) -> None:
        # Imported here, where a model has the pattern: loading the engine loads no kernel module.
        from lite.ops._pool_common import pool_geometry
        from lite.ops._shifted_max import shifted_max_2d

        self.pool_geometry = pool_geometry
        self.shifted_max_2d = shifted_max_2d
        self.block = block
        self.x_index = block[0].inputs[0]
        self.amounts = amounts
        self.value = value
        self.keywords = block[1].keywords
        self.constants = constants
        self.geometries: PlanCache[Any] = PlanCache()

    def __call__(self, x: Any, allocate: Callable = np.empty) -> Any:
        if type(x) is np.ndarray and x.dtype in FLOATS and x.ndim == 4 and 0 not in x.shape:
            geometry = self._geometry(x)
            if geometry is not None:
                fill = x.dtype.type(0 if self.value is None else self.value.reshape(-1)[0])
                y = self.shifted_max_2d(x, geometry, allocate, fill)
                if y is not None:
                    return y
        return run_steps(self.block, {self.x_index: x}, self.constants, allocate)

    def _geometry(self, x: np.ndarray) -> Any:
        """The pool's geometry over ``x`` with the Pad's amounts as pads, if its windows are the
        ones over the padded tensor (None otherwise, or where the attributes are refused)."""
        known = self.geometries.get(x.shape, _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        top, left, bottom, right = self.amounts
        padded = np.empty((0, 0, x.shape[2] + top + bottom, x.shape[3] + left + right), x.dtype)
        attributes = {name: self.keywords.get(name) for name in ("kernel_shape", "strides", "dilations")}
        ceil_mode = self.keywords.get("ceil_mode", 0)
        try:
            geometry = self.pool_geometry("MaxPool", x, **attributes, auto_pad="NOTSET", pads=self.amounts,
                                     ceil_mode=ceil_mode)
            expected = self.pool_geometry("MaxPool", padded, **attributes, auto_pad="NOTSET", pads=None,
                                     ceil_mode=ceil_mode)
        except LiteError:
            geometry = expected = None  # the nodes' kernels give the error
        if geometry is not None and geometry.out_shape != expected.out_shape:
            geometry = None
        return self.geometries.put(x.shape, geometry)
