"""im2col on the stride-phase grid of a small image: one long contiguous copy per tap and channel.

https://onnx.ai/onnx/operators/onnx__Conv.html

The classic im2col matrix ``(C * kh * kw, out_h * out_w)`` of a channels-first image is copied
one window row at a time, ``out_w`` cells each (strided by ``stride_w`` cells): on a 64x64
model's maps numpy's per-row overhead is most of the copy (ResNeXt's grouped 3x3 convolution of a
16x16 map copied 18,432 rows of 16 cells in 134 µs, ResNet's 7x7 stride-2 stem 4,704 rows of 32
strided cells in 91 µs). Here the zero-padded image is split once into its ``stride_h x
stride_w`` phases, each a grid of ``grid_h x grid_w`` cells (``grid = ceil(padded / stride)``):
phase ``(a, b)`` holds padded cell ``(r * stride_h + a, q * stride_w + b)`` at ``(r, q)``. Tap
``(i, j)`` of output cell ``(o_h, o_w)`` reads padded cell ``(o_h * stride_h + i * d_h,
o_w * stride_w + j * d_w)``, which is phase ``(i * d_h % stride_h, j * d_w % stride_w)`` at
``(o_h + i * d_h // stride_h, o_w + j * d_w // stride_w)``. Over a *wide* output of ``out_h``
rows of ``grid_w`` columns, flat column ``o_h * grid_w + o_w`` of that tap is the phase's flat
cell ``(i * d_h // stride_h) * grid_w + j * d_w // stride_w`` plus that same column: one
contiguous run of ``out_h * grid_w`` cells per tap and channel. The first ``out_w`` columns of
each wide row are the real outputs; the other ``grid_w - out_w`` read on into the next row (or
the zeroed tail past the last plane) and are computed for nothing, so the path is taken where
they are few (:func:`suits`).

One GEMM (batched over the groups) writes the wide output, the bias added by the GEMM itself (a
row of ones under each group's columns, the bias beside its weights); the activation is applied
while the real columns are copied out into the contiguous output, one pass.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from lite.ops import _parallel as parallel
from lite.ops import fused_activation as activations
from lite.ops._conv_gemm import Im2col
from lite.ops._layout import is_channels_last
from lite.ops.registry import SMALL_ARRAY_BYTES

# At most this fraction of the GEMM's columns computed for nothing: an 8x8 map's 3x3 convolution
# computes 10 columns a row for 8. A 4x4 map's (6 for 4) ran 0.89x alone but cost RegNet's run
# 2-4% (process CPU time), so it keeps the classic copy.
_WASTE = 0.25
# A strided convolution only where the classic copy would be at least this many rows: the phase
# buffer's fill (one strided copy per phase) costs more than it saves below (RegNet's grouped
# stride-2 layers of 2,304 rows ran 1.2-1.4x slower, ResNeXt's of 18,432 rows 0.83-0.90x).
_MIN_STRIDED_ROWS = 8192
# The column matrix of one image, at most this big (a small image's path).
_COLUMNS_BYTES = 4 << 20
# One group: stride 1 only where the wide grid adds at most this fraction of columns (a 16x16
# map's 3x3 convolution computes 18 columns a row for 16: 0.62-0.90x the time of
# lite.ops._conv_gemm.Im2col on 16-64 channels, DenseNet's run 0.87-0.92x; an 8x8 map's, 10 for
# 8, ran 1.1-1.4x slower, a 15x15 map's 1.03x), in place of Im2col only (larger column matrices
# take the block paths). Strided layers keep Im2col: 3x3 stride-2 ones of 288-2,304
# classic rows ran 1.25-1.4x slower here, and the 7x7 stride-2 stem of a 64x64 ResNet, 0.87-0.99x
# alone, gained nothing in the models' runs.
_ONE_GROUP_WASTE = 0.125
# Scratch (phase buffer and columns) at most this big is kept per thread between calls.
_KEPT_SCRATCH_BYTES = 2 << 20


def _grid(size: int, begin: int, end: int, stride: int) -> int:
    return -(-(size + begin + end) // stride)


def suits(x, w, group, kernel_dims, begin, end, strides, out_shape) -> bool:
    """Convolutions of channels-first 2-D images, kernels larger than 1x1, not depthwise, whose
    wide output is at most ``_WASTE`` wider than the output and whose column matrix is small;
    strided ones only where the classic copy has many rows. One group (where the classic copy's
    rows are longer, see lite.ops._conv_gemm.Im2col): stride 1 under the ``_ONE_GROUP_*`` bounds."""
    if x.ndim != 4 or len(kernel_dims) != 2 or min(out_shape) < 1 or min(begin + end) < 0:
        return False
    channels = x.shape[1]
    if group == channels or all(k == 1 for k in kernel_dims) or is_channels_last(x):
        return False
    one = group == 1
    strided = any(s != 1 for s in strides)
    grid_w = _grid(x.shape[3], begin[1], end[1], strides[1])
    if grid_w > out_shape[1] * (1 + (_ONE_GROUP_WASTE if one else _WASTE)):
        return False
    depth = channels * math.prod(kernel_dims)
    if one and (strided or not Im2col.suits(x, w, group, begin, end, out_shape)):
        return False
    if strided and depth * out_shape[0] < _MIN_STRIDED_ROWS:
        return False
    return depth * out_shape[0] * grid_w * w.dtype.itemsize <= _COLUMNS_BYTES


class PhaseGrid:
    """A 2-D convolution by im2col on the stride-phase grid (see the module docstring), everything
    but the data decided at build: the phase buffer's layout, one view per phase pair of the
    kernel's taps, the weights as ``(groups, M/groups, C/groups * kh * kw)``."""

    def __init__(self, x, w, bias, activation, kernel_dims, begin, end, strides, dilations, out_shape, group):
        batch, channels, height, width = x.shape
        out_channels = w.shape[0]
        kernel_h, kernel_w = kernel_dims
        stride_h, stride_w = strides
        self.out_h, self.out_w = out_h, out_w = out_shape
        self.grid_h = grid_h = _grid(height, begin[0], end[0], stride_h)
        self.grid_w = grid_w = _grid(width, begin[1], end[1], stride_w)
        self.plane = plane = grid_h * grid_w
        self.length = length = out_h * grid_w  # the wide output's columns
        self.channels = channels
        self.group = group
        self.item = item = w.dtype.itemsize
        depth = channels // group * kernel_h * kernel_w
        self.fold = bias is not None
        matrix = w.reshape(group, out_channels // group, depth)
        if self.fold:
            matrix = np.concatenate([matrix, bias.reshape(group, out_channels // group, 1).astype(w.dtype)], axis=2)
        self.matrix = np.ascontiguousarray(matrix)
        self.depth = depth
        # Taps by phase pair: each phase's kernel rows (columns) and their grid offsets.
        rows = _phases(kernel_h, dilations[0], stride_h)
        columns = _phases(kernel_w, dilations[1], stride_w)
        self.phase_count = stride_h * stride_w
        reach = max(first_i * grid_w + first_j + (len(is_) - 1) * step_i * grid_w + (len(js) - 1) * step_j
                    for _, is_, first_i, step_i in rows for _, js, first_j, step_j in columns)
        self.buffer_size = self.phase_count * channels * plane + reach
        # (phase offset in cells, kernel rows, kernel columns, view shape, view strides in bytes)
        self.copies = []
        for a, is_, first_i, step_i in rows:
            for b, js, first_j, step_j in columns:
                start = (a * stride_w + b) * channels * plane + first_i * grid_w + first_j
                shape = (group, channels // group, len(is_), len(js), length)
                view_strides = (channels // group * plane * item, plane * item, step_i * grid_w * item, step_j * item,
                                item)
                self.copies.append((start * item, _slice(is_), _slice(js), shape, view_strides))
        # The image's cells per phase: (phase, rows, columns) -> (buffer rows, buffer columns).
        self.fills = []
        for a in sorted({phase for phase, *_ in rows}):
            for b in sorted({phase for phase, *_ in columns}):
                target, source = [], []
                for residue, first, stride, size, cells in ((a, begin[0], stride_h, height, grid_h),
                                                            (b, begin[1], stride_w, width, grid_w)):
                    # Grid cell t holds padded cell residue + stride*t, input cell residue - first + stride*t.
                    t_start = max(0, -(-(first - residue) // stride))
                    x_start = residue - first + stride * t_start
                    count = min(cells - t_start, max(0, -(-(size - x_start) // stride)))
                    target.append(slice(t_start, t_start + max(count, 0)))
                    source.append(slice(x_start, x_start + stride * (count - 1) + 1, stride) if count > 0
                                  else slice(0, 0))
                if target[0].stop > target[0].start and target[1].stop > target[1].start:
                    self.fills.append(((a * stride_w + b), tuple(target), tuple(source)))
        # Per group: its channels' taps, then (with a bias) the row of ones.
        self.columns_shape = (group, depth + self.fold, length)
        self.window_shape = (group, channels // group, kernel_h, kernel_w, length)
        self.product_shape = (group, out_channels // group, length)
        self.y_shape = (batch, out_channels, out_h, out_w)
        # Outputs below the arena's floor: numpy's allocator directly, without the pool's call.
        self.small = math.prod(self.y_shape) * item < SMALL_ARRAY_BYTES
        self.split = group == 1 and out_channels * depth * length >= parallel.SPLIT_MULTIPLY_ADDS
        self.finish = _copy if activation is None else activations.into(*activation, w.dtype)
        scratch = (self.buffer_size + math.prod(self.columns_shape) + out_channels * length) * item
        self.keeps_scratch = scratch <= _KEPT_SCRATCH_BYTES
        self._local = threading.local()

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        if self.keeps_scratch:
            scratch = getattr(self._local, "scratch", None)
            if scratch is None or scratch[0].dtype != x.dtype:
                scratch = self._local.scratch = self._scratch(x.dtype, np.empty)
            buffer, columns, wide = scratch
        else:
            buffer, columns, wide = self._scratch(x.dtype, allocate)
        # A view: the group's rows of taps split into (channel, kernel row, kernel column).
        # (splitting the last axis, contiguous in each row, is always a view; reshape's copy=False,
        # which would say so, is numpy >= 2.1 only)
        windows = columns[:, : self.depth].reshape(self.window_shape)
        phases = buffer[: self.phase_count * self.channels * self.plane].reshape(
            self.phase_count, self.channels, self.grid_h, self.grid_w)
        y = (np.empty if self.small else allocate)(self.y_shape, x.dtype)
        matrix = self.matrix
        product = wide.reshape(self.product_shape)
        real = wide.reshape(-1, self.out_h, self.grid_w)[:, :, : self.out_w]
        for n in range(x.shape[0]):
            image = x[n]
            for phase, target, source in self.fills:
                np.copyto(phases[(phase, slice(None), *target)], image[(slice(None), *source)])
            for offset, rows, kernel_columns, shape, strides in self.copies:
                np.copyto(windows[:, :, rows, kernel_columns], np.ndarray(shape, x.dtype, buffer, offset, strides))
            if self.split:
                parallel.matmul(matrix[0], columns[0], product[0])
            else:
                np.matmul(matrix, columns, out=product)
            self.finish(real, y[n])
        return y

    def _scratch(self, dtype, allocate):
        """The phase buffer (zeroed: a call writes only the image's cells), the column matrix
        (its rows of ones set: a call writes only the taps) and the wide output."""
        buffer = allocate((self.buffer_size,), dtype)
        buffer.fill(0)
        columns = allocate(self.columns_shape, dtype)
        if self.fold:
            columns[:, self.depth] = 1
        return buffer, columns, allocate((self.product_shape[0] * self.product_shape[1], self.length), dtype)


def _phases(kernel: int, dilation: int, stride: int) -> list[tuple[int, list[int], int, int]]:
    """Per phase of one axis: (phase, the kernel indices reading it, the first one's grid offset,
    the offset step between them). Index ``k`` reads phase ``k*d % s`` at offset ``k*d // s``;
    one phase's indices and offsets are arithmetic progressions."""
    by_phase: dict[int, list[int]] = {}
    for k in range(kernel):
        by_phase.setdefault(k * dilation % stride, []).append(k)
    phases = []
    for phase, indices in sorted(by_phase.items()):
        offsets = [k * dilation // stride for k in indices]
        step = offsets[1] - offsets[0] if len(offsets) > 1 else 1
        phases.append((phase, indices, offsets[0], step))
    return phases


def _slice(indices: list[int]) -> slice:
    step = indices[1] - indices[0] if len(indices) > 1 else 1
    return slice(indices[0], indices[-1] + 1, step)


def _copy(x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, x)
