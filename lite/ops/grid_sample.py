"""GridSample: sample the input at normalized grid locations (spatial transformer networks).

https://onnx.ai/onnx/operators/onnx__GridSample.html

grid ``(N, *out, rank)`` holds coordinates in [-1, 1], innermost axis first (x, y, ...).
Opset 16 is 2-D with modes bilinear/nearest/bicubic; opset 20 is N-D and renames them
linear/nearest/cubic. Padding: ``zeros`` (outside reads 0), ``border`` (clamp),
``reflection`` (mirror). A coordinate outside the border range is first clamped or mirrored;
then every interpolation tap index is read per the padding mode (as ONNX Runtime does).
"""

from __future__ import annotations

import itertools

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel

_MODE_NAMES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


def _reflect(x, low, high):
    """Mirror x at the nearer border until it lies in [low, high]."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below = low - x
    above = x - high
    folds_below = np.trunc(below / span)
    folds_above = np.trunc(above / span)
    rest_below = below - folds_below * span
    rest_above = above - folds_above * span
    reflected_below = np.where(np.mod(folds_below, 2) == 0, low + rest_below, high - rest_below)
    reflected_above = np.where(np.mod(folds_above, 2) == 0, high - rest_above, low + rest_above)
    return np.where(x < low, reflected_below, np.where(x > high, reflected_above, x))


def _unnormalize(g, size, align_corners):
    return (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2


def _cubic_weights(t, a=-0.75):
    """Weights of taps at offsets -1, 0, 1, 2 for fractional position t."""
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(X, grid, mode, padding_mode, align_corners):
    if mode not in _MODE_NAMES:
        raise UnsupportedOpError(f"GridSample: unknown mode {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise UnsupportedOpError(f"GridSample: padding_mode must be zeros, border or reflection, got {padding_mode!r}")
    mode = _MODE_NAMES[mode]
    x = np.asarray(X)
    grid = np.asarray(grid, dtype=np.float64)
    batch, channels = x.shape[:2]
    spatial = x.shape[2:]
    rank = len(spatial)
    if grid.shape[-1] != rank or grid.shape[0] != batch:
        raise UnsupportedOpError(f"GridSample: grid shape {grid.shape} does not fit input {x.shape}")
    out_spatial = grid.shape[1:-1]
    # Axis d of the input is grid component rank-1-d (the grid lists x first).
    coords = [_unnormalize(grid[..., rank - 1 - d], spatial[d], align_corners) for d in range(rank)]
    per_axis = []  # per axis: the (index, weight) arrays of its interpolation taps
    for d, size in enumerate(spatial):
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        c = coords[d]
        if mode == "nearest":
            c = np.rint(c)  # half to even, as PyTorch and ONNX Runtime
        outside = (c < low) | (c > high)
        if padding_mode == "border":
            c = np.where(outside, np.clip(c, 0, size - 1), c)
        elif padding_mode == "reflection":
            c = np.where(outside, _reflect(c, low, high), c)
        if mode == "nearest":
            taps = [(np.trunc(c), np.ones_like(c))]
        elif mode == "linear":
            base = np.floor(c)
            taps = [(base, 1 - (c - base)), (base + 1, c - base)]
        else:
            base = np.floor(c)
            taps = [(base + k - 1, w) for k, w in enumerate(_cubic_weights(c - base))]
        # Each tap index is then read per padding_mode: 0 outside, clamped, or mirrored.
        if padding_mode == "border":
            taps = [(np.clip(i, 0, size - 1), w) for i, w in taps]
        elif padding_mode == "reflection":
            taps = [(np.trunc(_reflect(i, low, high)), w) for i, w in taps]
        per_axis.append(taps)
    y = np.zeros((batch, channels) + out_spatial, dtype=np.float64)
    batch_index = np.arange(batch).reshape((batch,) + (1,) * len(out_spatial))
    for combo in itertools.product(*per_axis):
        weight = np.ones(grid.shape[:-1])
        inside = np.ones(grid.shape[:-1], dtype=bool)
        indices = []
        for (index, w), size in zip(combo, spatial):
            index = index.astype(np.int64)
            inside &= (index >= 0) & (index < size)
            indices.append(np.clip(index, 0, size - 1))
            weight = weight * w
        weight = np.where(inside, weight, 0.0)
        y += _gather(x, batch_index, indices) * weight[:, None]
    return y.astype(x.dtype)


def _gather(x, batch_index, indices):
    """x[n, :, i0[n, ...], i1[n, ...], ...] as (N, C, *out)."""
    moved = np.moveaxis(x, 1, -1)  # (N, *spatial, C)
    values = moved[(batch_index,) + tuple(indices)]  # (N, *out, C)
    return np.moveaxis(values, -1, 1)


@kernel("GridSample", since=16)
def GridSample_16(X, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    if np.ndim(X) != 4:
        raise UnsupportedOpError("GridSample-16: only 4-D inputs (N, C, H, W); opset 20 allows N-d")
    return grid_sample(X, grid, mode, padding_mode, align_corners)


@kernel("GridSample", since=20)
def GridSample(X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    return grid_sample(X, grid, mode, padding_mode, align_corners)
