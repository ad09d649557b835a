"""Tile: repeat a tensor along its axes. https://onnx.ai/onnx/operators/onnx__Tile.html

Opset 6 on: ``repeats`` holds one count per axis. Opset 1: the scalar inputs ``tiles`` and
``axis`` repeat along one axis only.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list, normalize_axis, scalar_int
from lite.ops.registry import kernel


@kernel("Tile", since=6)
def Tile(input, repeats):
    input = np.asarray(input)
    counts = int_list(repeats)
    if len(counts) != input.ndim or any(c < 0 for c in counts):
        raise KernelError(f"Tile: expected {input.ndim} non-negative repeats, got {counts}")
    return np.tile(input, counts)


@kernel("Tile", since=1)
def Tile_v1(input, tiles, axis):
    input = np.asarray(input)
    counts = [1] * input.ndim
    counts[normalize_axis("Tile", scalar_int("Tile", "axis", axis), input.ndim)] = scalar_int(
        "Tile", "tiles", tiles
    )
    return Tile(input, counts)
