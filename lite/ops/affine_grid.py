"""AffineGrid: the sampling grid of a batch of 2-D or 3-D affine transforms.

https://onnx.ai/onnx/operators/onnx__AffineGrid.html

For ``size = (N, C, H, W)`` and ``theta`` of shape ``(N, 2, 3)``, ``grid[n, h, w] =
theta[n] @ (x_w, y_h, 1)``, with normalized coordinates in ``[-1, 1]``: pixel centres
``-1 + 2i / (n - 1)`` with ``align_corners=1`` and ``(2i + 1) / n - 1`` otherwise. 3-D works the
same with ``(N, C, D, H, W)``, ``theta (N, 3, 4)`` and points ``(x, y, z, 1)``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list
from lite.ops.registry import kernel


def _coordinates(count: int, align_corners: int) -> np.ndarray:
    centres = np.linspace(-1.0, 1.0, count)
    return centres if align_corners else centres * (count - 1) / count


@kernel("AffineGrid", since=20)
def AffineGrid(theta, size, *, align_corners=0):
    theta = np.asarray(theta)
    extents = int_list(size)
    spatial = len(extents) - 2
    if spatial not in (2, 3) or theta.shape != (extents[0], spatial, spatial + 1):
        raise KernelError(
            f"AffineGrid: theta of shape {theta.shape} does not fit size {extents} "
            "(expected (N, 2, 3) with (N, C, H, W), or (N, 3, 4) with (N, C, D, H, W))"
        )
    # Coordinates listed x first: x runs along the last (width) axis.
    axes = [_coordinates(extent, align_corners) for extent in reversed(extents[2:])]
    mesh = list(np.meshgrid(*axes, indexing="ij"))  # each (W, H[, D])
    points = np.stack(mesh + [np.ones_like(mesh[0])], axis=-1)
    points = points.transpose(*reversed(range(spatial)), spatial)  # ([D,] H, W, spatial + 1)
    grid = np.einsum("nij,...j->n...i", theta.astype(np.float64), points)
    return grid.astype(theta.dtype)
