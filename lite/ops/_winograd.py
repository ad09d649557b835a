"""Winograd F(2x2, 3x3): 3x3 stride-1 convolutions with 2.25x fewer multiplications.

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016). Each 2x2 output tile
is computed from the 4x4 input tile ``d`` under it and the 3x3 kernel ``g``:

    Y = A^T [ (G g G^T) * (B^T d B) ] A          (* elementwise over the 4x4 positions)

Summed over input channels, the 16 positions (a, b) are 16 independent GEMMs

    M[a, b] (M_out, tiles) = U[a, b] (M_out, C) @ V[a, b] (C, tiles)

with ``U = G g G^T`` transformed once when the model is loaded (:func:`transform_weights`, from the
engine's ``prepare`` hook) and ``V = B^T d B`` computed per call. 16 * C * M multiplications per
2x2 tile instead of 36 * C * M, for the price of the two transforms, which are sums and
differences: here with numpy ufuncs over whole rows of tiles.

Layout: the padded input is split into its four stride-2 phases (even/odd rows x even/odd
columns). Input tile (t, u) covers padded rows 2t..2t+3 and columns 2u..2u+3, so its cell (i, k)
is cell (t + i // 2, u + k // 2) of phase (i % 2, k % 2): over all tiles of a band of tile rows,
one contiguous slice of that phase plane on a grid one column wider than the tiles (the extra
column is computed and dropped, as in the depthwise path's wide form). The output transform is
one small GEMM ``(4, 16) @ (16, M_out * tiles)``; its four rows are the four output phases,
written with the bias (and activation) into the strided output.

Rounding differs from direct convolution by a few float32 ulps of the transforms' sums (relative
error around 1e-6 for unit-scale data).
"""

from __future__ import annotations

import numpy as np

from lite.ops import fused_activation as activations

# G (4x3), B^T (4x4), A^T (2x4) of F(2x2, 3x3).
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_AT = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]])
# Output transform as one matrix: row (a, c) holds A^T[a, i] * A^T[c, j] at column (i, j).
_OUTPUT = np.einsum("ai,cj->acij", _AT, _AT).reshape(4, 16)

# Worth it from this many input and output channels on (below, the GEMMs are too small to gain)
# and for outputs at least this wide and high (below, the tiles' edges and the transforms cost
# more than the multiplications saved).
MIN_CHANNELS = 16
MIN_OUTPUT = 12
# Nor below this many channel pairs times output pixels (the direct GEMM's work over 9): a
# 64x64 model's 16x16 layers with 16-64 channels ran 1.3-3x slower here than on the one-copy
# im2col of lite.ops.conv; from 14x14 with 128 channels or 28x28 with 64 on, this path wins.
MIN_WORK = 2 << 20
# Scratch elements (phase planes, B^T d, V, the GEMM outputs): 2.5 MiB in float32. Layers whose
# transforms need more take the direct path: the memory planner's bound leaves about this much
# beside the live activations of the small-image layers this pays off on (ResNet-18's 14x14).
_SCRATCH_ELEMENTS = 640 * 1024


def suits(w_shape, group, kernel, strides, dilations) -> bool:
    """True for the convolutions this path computes: 2-D, 3x3, stride 1, no dilation, no groups."""
    return (
        len(w_shape) == 4
        and group == 1
        and tuple(kernel) == (3, 3)
        and tuple(w_shape[2:]) == (3, 3)
        and all(s == 1 for s in strides)
        and all(d == 1 for d in dilations)
        and w_shape[0] >= MIN_CHANNELS
        and w_shape[1] >= MIN_CHANNELS
    )


def transform_weights(w: np.ndarray, dtype) -> np.ndarray:
    """``U = G g G^T`` for every (output, input) channel pair: ``(16, M, C)``, read-only."""
    out_channels, channels = w.shape[:2]
    g = np.asarray(w, dtype=np.float64).reshape(out_channels * channels, 3, 3)
    u = np.matmul(np.matmul(_G, g), _G.T)  # (M * C, 4, 4)
    u = np.ascontiguousarray(u.reshape(out_channels, channels, 16).transpose(2, 0, 1), dtype=dtype)
    u.flags.writeable = False
    return u


def fits(channels: int, out_channels: int, out_shape) -> bool:
    """True when the whole image's transforms fit the scratch budget (the path runs at once
    over every tile: its elementwise steps are then single passes over contiguous memory)."""
    out_h, out_w = out_shape
    if min(out_h, out_w) < MIN_OUTPUT or channels * out_channels * out_h * out_w < MIN_WORK:
        return False
    plane, span = _grid(out_h, out_w)
    return _scratch(channels, out_channels, plane, span) <= _SCRATCH_ELEMENTS


def _grid(out_h, out_w):
    """(cells of a phase plane, cells of the wide tile grid)."""
    tiles_h, tiles_w = -(-out_h // 2), -(-out_w // 2)
    return (tiles_h + 1) * (tiles_w + 1), tiles_h * (tiles_w + 1)


def _scratch(channels, out_channels, plane, span):
    # phase planes and a row of B^T d per column tap (4 + 4), V (16) over every plane cell;
    # the GEMM outputs (16) and the output phases (4, in V's memory when they fit) over the tiles.
    phases = 0 if 4 * out_channels * span <= 16 * channels * plane else 4 * out_channels * span
    return 24 * channels * plane + 16 * out_channels * span + phases


def convolve(x, u, bias, activation, begin, end, out_shape, allocate):
    """``x`` (N, C, H, W) convolved with the kernels whose transform is ``u``, padded by
    ``begin``/``end``; returns (N, M, out_h, out_w) from ``allocate``."""
    batch, channels, height, width = x.shape
    out_channels = u.shape[1]
    out_h, out_w = out_shape
    tiles_h, tiles_w = -(-out_h // 2), -(-out_w // 2)
    plane_w = tiles_w + 1
    plane, span = _grid(out_h, out_w)
    y = allocate((batch, out_channels, out_h, out_w), x.dtype)
    # Every step runs over all channels' planes as one flat vector (a plane's last row and
    # column, and the cells between channels, compute values nobody reads). A tap's slice
    # starts up to plane_w + 1 cells in, so the flat planes run that far past C * plane.
    extent = channels * plane
    planes = allocate((2, 2, extent + plane_w + 1), x.dtype)
    rows = allocate((4, extent), x.dtype)  # row a of B^T d, for each tile column tap
    v = allocate((16, extent), x.dtype)
    m = allocate((16, out_channels, span), x.dtype)
    shared = 4 * out_channels * span <= 16 * extent
    phases = (v.reshape(-1) if shared else allocate((4 * out_channels * span,), x.dtype))
    phases = phases[: 4 * out_channels * span].reshape(4, out_channels, tiles_h, plane_w)
    output = _OUTPUT.astype(x.dtype)
    for n in range(batch):
        _fill_planes(planes, x[n], begin, plane, plane_w)
        _input_transform(planes, rows, v, extent, plane_w)
        np.matmul(u, v.reshape(16, channels, plane)[:, :, :span], out=m)
        np.matmul(output, m.reshape(16, -1), out=phases.reshape(4, -1))
        for index in range(4):
            a, c = divmod(index, 2)
            target = y[n, :, a::2, c::2]
            source = phases[index, :, : target.shape[1], : target.shape[2]]
            if bias is not None:
                np.add(source, bias[:, None, None], out=target)
            else:
                np.copyto(target, source)
        if activation is not None:
            activations.apply_into(y[n], y[n], *activation)
    del planes, rows, v, m, phases
    return y


def _fill_planes(planes, image, begin, plane, plane_w):
    """Phase (r, s) of the zero-padded ``image`` (C, H, W): padded cell (2i + r, 2j + s) at (i, j)."""
    channels, height, width = image.shape
    top, left = begin
    plane_h = plane // plane_w
    planes.fill(0)
    for r in range(2):
        for s in range(2):
            grid = planes[r, s, : channels * plane].reshape(channels, plane_h, plane_w)
            # Plane row i holds image row 2i + r - top: the first i with it >= 0, and how many.
            i0, j0 = max(0, -(-(top - r) // 2)), max(0, -(-(left - s) // 2))
            row, column = 2 * i0 + r - top, 2 * j0 + s - left
            count_h = min(plane_h - i0, max(0, -(-(height - row) // 2)))
            count_w = min(plane_w - j0, max(0, -(-(width - column) // 2)))
            if count_h > 0 and count_w > 0:
                grid[:, i0 : i0 + count_h, j0 : j0 + count_w] = image[
                    :, row : row + 2 * count_h - 1 : 2, column : column + 2 * count_w - 1 : 2
                ]


def _input_transform(planes, rows, v, extent, plane_w):
    """``V = B^T d B`` for every tile: ``v[4a + b]`` over the flat planes. Tile (t, u)'s cell
    (i, k) is cell (t + i // 2, u + k // 2) of phase (i % 2, k % 2)."""

    def cell(i, k):
        start = (i // 2) * plane_w + k // 2
        return planes[i % 2, k % 2, start : start + extent]

    for a in range(4):
        # Row a of B^T d, for each tile column tap k: B^T rows are d0-d2, d1+d2, d2-d1, d1-d3.
        for k in range(4):
            _combine(a, cell(0, k), cell(1, k), cell(2, k), cell(3, k), rows[k])
        # ... then B on the right: the same combinations over the columns.
        for b in range(4):
            _combine(b, rows[0], rows[1], rows[2], rows[3], v[4 * a + b])


def _combine(index, d0, d1, d2, d3, out):
    """Row ``index`` of B^T applied to (d0, d1, d2, d3)."""
    if index == 0:
        np.subtract(d0, d2, out=out)
    elif index == 1:
        np.add(d1, d2, out=out)
    elif index == 2:
        np.subtract(d2, d1, out=out)
    else:
        np.subtract(d1, d3, out=out)
