"""The Conv paths that work through the input block by block (Winograd, grouped, wide and plain
im2col, depthwise taps, strided or padded pointwise): large images, whose im2col matrix is
bounded by ``_COLUMNS_BYTES`` per GEMM (see :mod:`lite.ops.conv`, which picks the path).

https://onnx.ai/onnx/operators/onnx__Conv.html
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops import _parallel as parallel
from lite.ops import _wide_im2col as wide_im2col
from lite.ops import _winograd as winograd
from lite.ops import fused_activation as activations
from lite.ops._conv_common import pad_input, windows
from lite.ops._depthwise_taps import depthwise_taps
from lite.ops._layout import channels_last_order, is_channels_last

# im2col columns per GEMM: at most this many bytes (the scratch stays bounded on big images),
# but at least _MIN_GEMM_COLUMNS output pixels, below which the GEMM slows down markedly.
_COLUMNS_BYTES = 1 << 20
_MIN_GEMM_COLUMNS = 512


class Direct:
    """The paths that work through the input block by block (Winograd, grouped, wide and plain
    im2col, depthwise taps, strided or padded pointwise), with the attributes resolved once."""

    def __init__(self, path, w, bias, activation, begin, end, strides, dilations, out_shape, group, kernel_dims):
        self.path = path
        self.w = w  # the Winograd transform on that path
        self.bias = bias
        self.activation = activation
        self.finish = Finish(bias, activation)
        self.begin, self.end, self.strides, self.dilations = begin, end, strides, dilations
        self.out_shape, self.group, self.kernel_dims = out_shape, group, kernel_dims
        out_channels = w.shape[1] if path == "winograd" else w.shape[0]
        # The wide path's GEMM adds the bias where the weights are a fraction of the output.
        self.fold = bias is not None and 4 * w.size < out_channels * math.prod(out_shape)
        self.out_channels = out_channels

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        path, w, begin, end, strides = self.path, self.w, self.begin, self.end, self.strides
        if path == "winograd":
            y = winograd.convolve(x, w, self.bias, self.activation, begin, end, self.out_shape, allocate)
        elif path == "depthwise taps":
            y = depthwise_taps(x, w, begin, end, strides, self.dilations, self.out_shape, allocate, self.finish)
        elif path == "pointwise":
            y = _pointwise(x, w, self.group, begin, end, strides, self.out_shape, self.finish, allocate)
        elif path == "wide":
            y = wide_im2col.convolve(x, w, self.group, self.kernel_dims, begin, end, strides, self.dilations,
                                     self.out_shape, Finish(None, self.activation) if self.fold else self.finish,
                                     allocate, _COLUMNS_BYTES, _MIN_GEMM_COLUMNS, self.bias if self.fold else None)
        else:
            padded = pad_input(x, begin, end, allocate=allocate)
            convolve = _im2col_grouped if path == "grouped" else _im2col
            y = convolve(padded, w, self.group, self.kernel_dims, strides, self.dilations, self.out_shape,
                         self.finish, allocate)
            del padded
        return y.reshape(x.shape[0], self.out_channels, *self.out_shape)

class Finish:
    """Adds the bias and applies the activation to one block ``(channels, pixels)`` of the output,
    in place; the block's channels are ``first_channel:stop_channel``."""

    def __init__(self, bias, activation):
        self.bias = bias
        self.activation = activation

    def __call__(self, block: np.ndarray, first_channel: int, stop_channel: int) -> None:
        if self.bias is not None:
            block += self.bias[first_channel:stop_channel, None]
        if self.activation is not None:
            activations.apply_into(block, block, *self.activation)


def _pointwise(x, w, group, begin, end, strides, out_shape, finish, allocate):
    """1x1 convolutions that are not Pointwise's (grouped, strided or padded): a GEMM per image
    and group."""
    plain = not any(begin) and not any(end) and all(s == 1 for s in strides)
    channels_last = plain and is_channels_last(x)
    pixels = math.prod(out_shape)
    if any(begin) or any(end):
        x = pad_input(x, begin, end, allocate=allocate)
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    if channels_last:
        # (N, C, pixels) as a transposed view of the (N, pixels, C) rows: matmul reads it as is.
        cols = x.transpose(channels_last_order(x.ndim)).reshape(batch, pixels, channels).transpose(0, 2, 1)
    else:
        if not plain or not x.flags.c_contiguous:
            sampled = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
            x = allocate(sampled.shape, x.dtype)
            np.copyto(x, sampled)
        cols = x.reshape(batch, channels, pixels)
    per_group, out_per_group = channels // group, out_channels // group
    weights = w.reshape(group, out_per_group, per_group)
    y = allocate((batch, out_channels, pixels), x.dtype)
    # One GEMM per image and group: its output rows are contiguous (a block of pixels would
    # not be, and matmul would then compute into a temporary and copy).
    for n in range(batch):
        for g in range(group):
            first, stop = g * out_per_group, (g + 1) * out_per_group
            block = y[n, first:stop]
            parallel.matmul(weights[g], cols[n, g * per_group : (g + 1) * per_group], block)
            finish(block, first, stop)
    return y


def _im2col(padded, w, group, kernel_dims, strides, dilations, out_shape, finish, allocate):
    batch, channels = padded.shape[:2]
    out_channels = w.shape[0]
    rank = len(kernel_dims)
    per_group, out_per_group = channels // group, out_channels // group
    depth = per_group * math.prod(kernel_dims)
    rows, row_pixels = out_shape[0], math.prod(out_shape[1:])
    view = windows(padded, kernel_dims, strides, dilations, out_shape)
    weights = w.reshape(group, out_per_group, depth)
    y = allocate((batch, out_channels, rows * row_pixels), padded.dtype)
    fitting = _COLUMNS_BYTES // max(1, depth * row_pixels * padded.dtype.itemsize)
    chunk = max(1, min(rows, max(fitting, -(-_MIN_GEMM_COLUMNS // max(1, row_pixels)))))
    columns = allocate((depth * chunk * row_pixels,), padded.dtype)
    for n in range(batch):
        for g in range(group):
            channels_in = slice(g * per_group, (g + 1) * per_group)
            first, stop = g * out_per_group, (g + 1) * out_per_group
            for row in range(0, rows, chunk):
                count = min(chunk, rows - row)
                source = view[(n, channels_in) + (slice(None),) * rank + (slice(row, row + count),)]
                cols = columns[: source.size].reshape(source.shape)
                np.copyto(cols, source)
                block = y[n, first:stop, row * row_pixels : (row + count) * row_pixels]
                parallel.matmul(weights[g], cols.reshape(depth, -1), block)
                finish(block, first, stop)
    return y


def _im2col_grouped(padded, w, group, kernel_dims, strides, dilations, out_shape, finish, allocate):
    """A grouped convolution whose columns fit the budget: one copy of the windows and one GEMM
    batched over the groups per image, ``W (g, M/g, C/g*K) @ cols (g, C/g*K, pixels)``, instead
    of a copy and a GEMM per group (RegNet's and ResNeXt's 3x3 convolutions on small maps were
    mostly that loop's overhead)."""
    batch, channels = padded.shape[:2]
    out_channels = w.shape[0]
    depth = channels // group * math.prod(kernel_dims)
    pixels = math.prod(out_shape)
    view = windows(padded, kernel_dims, strides, dilations, out_shape)
    weights = w.reshape(group, out_channels // group, depth)
    y = allocate((batch, out_channels, pixels), padded.dtype)
    columns = allocate(view.shape[1:], padded.dtype)
    for n in range(batch):
        np.copyto(columns, view[n])
        np.matmul(weights, columns.reshape(group, depth, pixels), out=y[n].reshape(group, out_channels // group, pixels))
        finish(y[n], 0, out_channels)
    return y
