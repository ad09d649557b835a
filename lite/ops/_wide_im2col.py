"""im2col on a wide grid: 2-D convolutions whose tap rows are long contiguous copies.

The classic im2col (the general path of lite.ops._conv_blocks) copies each tap's window row by row, and a row
is only ``out_w`` long: on small images numpy's per-row overhead dominates the copy. Here the
zero-padded input is split into its ``stride_w`` column phases (as in the depthwise path,
:mod:`lite.ops._depthwise`), each ``grid_w = ceil(padded_w / stride_w)`` columns wide. Output
column ``q`` of tap ``(i, j)`` reads phase ``j*d % s`` at column ``q + j*d // s``, so for a block
of output rows a tap is a run of ``count`` rows of ``grid_w`` contiguous cells (one run when the
row stride is 1): the first ``out_w`` of each row are real outputs, the other ``grid_w - out_w``
read past the row and are computed for nothing. The GEMM writes an output laid out
``(N, M, out_h, grid_w)``; the kernel returns its ``(N, M, out_h, out_w)`` view.

Used where those extra columns cost less than the copies save: ``grid_w <= out_w * (1 + _WASTE)``.
"""

from __future__ import annotations

import numpy as np

from lite.ops._conv_common import fill_phase

# At most this fraction of extra GEMM columns (ResNet's 56x56 layers: 3.6%).
_WASTE = 0.1


def _grid_w(width, begin, end, stride_w):
    return max(-(-(width + begin[1] + end[1]) // stride_w), 1)


def suits(x, begin, end, strides, out_shape) -> bool:
    """True for 2-D inputs whose wide grid is at most ``_WASTE`` wider than the output."""
    if x.ndim != 4 or min(out_shape) < 1:
        return False
    return _grid_w(x.shape[3], begin, end, strides[1]) <= out_shape[1] * (1 + _WASTE)


def _column_phases(kernel_w, dilation_w, stride_w):
    """(phase, kernel columns as a slice, first column offset, offset step) per column phase.
    Column j reads phase (j*d) % s at offset (j*d) // s; one phase's columns and offsets are
    arithmetic progressions."""
    columns: dict[int, list[int]] = {}
    for j in range(kernel_w):
        columns.setdefault(j * dilation_w % stride_w, []).append(j)
    phases = []
    for phase, js in sorted(columns.items()):
        step = js[1] - js[0] if len(js) > 1 else 1
        offsets = [j * dilation_w // stride_w for j in js]
        offset_step = offsets[1] - offsets[0] if len(offsets) > 1 else 1
        phases.append((phase, slice(js[0], js[-1] + 1, step), len(js), offsets[0], offset_step))
    return phases


def convolve(x, w, group, kernel_dims, begin, end, strides, dilations, out_shape, finish, allocate,
             columns_bytes, min_columns, bias=None):
    """Y = conv(X, W) through wide-grid im2col; ``finish(block, first, stop)`` applies the rest
    (bias, activation) to each GEMM's block of output channels. Returns a view (N, M, out_h, out_w).

    ``bias``, when given, is added by the GEMM itself: a row of ones under the columns and the
    bias as one more column of the weights, instead of a pass over the output. Worth it while
    the weights are much smaller than the output (the copy of them costs less than that pass,
    and the memory it takes is small)."""
    batch, channels, height, width = x.shape
    out_channels = w.shape[0]
    kernel_h, kernel_w = kernel_dims
    stride_h, stride_w = strides
    dilation_h, dilation_w = dilations
    out_h, out_w = out_shape
    padded_h = height + begin[0] + end[0]
    grid_w = _grid_w(width, begin, end, stride_w)
    plane = padded_h * grid_w
    phases = _column_phases(kernel_w, dilation_w, stride_w)
    reach = max(first + (count - 1) * step for _, _, count, first, step in phases)
    # One buffer per phase, its channels' planes back to back, zero past the last one: the last
    # row's extra columns read up to ``reach`` cells beyond it.
    buffers = allocate((len(phases), channels * plane + reach), x.dtype)
    per_group, out_per_group = channels // group, out_channels // group
    depth = per_group * kernel_h * kernel_w
    rows = depth + (bias is not None)  # rows of the GEMM's column matrix
    weights = w.reshape(group, out_per_group, depth)
    if bias is not None:
        augmented = allocate((group, out_per_group, rows), x.dtype)
        augmented[..., :depth] = weights
        augmented[..., depth] = bias.reshape(group, out_per_group)
        weights = augmented
    wide = allocate((batch, out_channels, out_h, grid_w), x.dtype)
    itemsize = x.dtype.itemsize
    fitting = columns_bytes // max(1, rows * grid_w * itemsize)
    chunk = max(1, min(out_h, max(fitting, -(-min_columns // grid_w))))
    columns = allocate((rows * chunk * grid_w,), x.dtype)
    for n in range(batch):
        buffers.fill(0)
        for index, (phase, _, _, _, _) in enumerate(phases):
            grid = buffers[index, : channels * plane].reshape(1, channels, padded_h, grid_w)
            fill_phase(grid, x[n : n + 1], (0, phase), begin, (1, stride_w))
        for g in range(group):
            first_channel, stop_channel = g * out_per_group, (g + 1) * out_per_group
            for row in range(0, out_h, chunk):
                count = min(chunk, out_h - row)
                matrix = columns[: rows * count * grid_w].reshape(rows, count * grid_w)
                if bias is not None:
                    matrix[depth] = 1
                cols = matrix[:depth].reshape(per_group, kernel_h, kernel_w, count, grid_w)
                for index, (_, js, taps, first, step) in enumerate(phases):
                    offset = index * buffers.shape[1] + g * per_group * plane + row * stride_h * grid_w + first
                    source = np.ndarray(
                        (per_group, kernel_h, taps, count, grid_w), x.dtype, buffers, offset * itemsize,
                        (plane * itemsize, dilation_h * grid_w * itemsize, step * itemsize,
                         stride_h * grid_w * itemsize, itemsize),
                    )
                    np.copyto(cols[:, :, js], source)
                block = wide[n, first_channel:stop_channel, row : row + count].reshape(out_per_group, -1)
                np.matmul(weights[g], matrix, out=block)
                finish(block, first_channel, stop_channel)
    del buffers, columns, weights
    return wide[..., :out_w]
