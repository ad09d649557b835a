"""Depthwise convolution on small maps, where the shifted-products paths of
:mod:`lite.ops._depthwise` spend their time on numpy's einsum (about 5 G multiply-adds a second
here) and on taps that read only padding:

- :class:`DepthwiseDense` (a third as many input cells as kernel taps or fewer: 7x7 kernels
  on 4x4 and 2x2 maps): every output cell as a weighted sum of the input cells, with the weights
  of every (input, output) pair laid out once, ``Y[o, c] = sum_p X[p, c] * M[p, o, c]``, one
  einsum over a channels-last input. A 4x4 map under a 7x7 kernel pads it to 10x10, 49 taps
  per output of which at most 16 reach the image. On ConvNeXt's 4x4 and 2x2 stages it took
  0.4-0.6 of the padded path's time alone and 0.6-0.8 in the model.
- :class:`DepthwiseProducts` (wide kernels on maps not much wider: 7x7 on 8x8 and 16x16): two
  batched matrix products per channel, which BLAS runs many times faster than einsum its
  fewer multiply-adds:

  - across: each image row times a banded (Toeplitz) matrix per channel holding the kernel's
    rows, ``Z[c, h, (i, ow)] = sum_v X[c, h, v] * T[c, v, (i, ow)]`` with
    ``T[c, v, i, ow] = w[c, i, v - ow + left]`` (zero off the band: the left and right padding);
  - down: ``Y[c, oh, ow] = sum_(h, i) S[oh, (h, i)] * Z[c, (h, i), ow]``, where ``Z[c]`` read
    as ``(H * kh, out_w)`` rows is exactly that matrix and ``S`` (0 or 1: ``h = oh - top + i``,
    the top and bottom padding) is one matrix for every channel.

  ``(H + W) / kh`` multiply-adds per tap instead of one, at BLAS's speed: on ConvNeXt's 16x16
  and 8x8 maps the two products took 0.75-0.95 of the einsum path's time (BLAS on one thread).

Both write their output channels-last with the bias and activation, as the other depthwise
path does (see :mod:`lite.ops._layout`). The products sum in another order than the tap by tap
path: the same values up to float rounding.
"""

from __future__ import annotations

import numpy as np

from lite.ops import fused_activation as activations

# Products: kernels from this wide on maps whose height plus width is at most _REACH kernel
# widths, with at least _MIN_CHANNEL_WORK multiply-adds in a channel's product across (below it
# the two BLAS calls per channel cost more than they save). Measured in the models (one BLAS
# thread): 7x7 kernels on 16x16 maps of 24 channels (28 K per channel) 0.75-0.9 of the einsum
# path's time, on 8x8 maps of 48 channels (3.6 K) 0.9-0.95; 5x5 kernels on FocalNet's 8x8 maps
# of 64 channels (2.6 K) and 4x4 maps of 128 took 1.3-1.7 times as long, 3x3 kernels on 8x8 and
# 16x16 maps (too many products per tap) 1.7-3 times.
_MIN_KERNEL = 5
_REACH = 5
_MIN_CHANNEL_WORK = 3500
# Dense: kernels of at least this many taps per input cell (7x7 on 4x4 maps: 49 taps, 16 cells;
# 3x3 kernels on 2x2 maps, 9 taps for 4 cells, ran no faster inside SegFormer), and the weights
# of every (input cell, output cell, channel) at most _DENSE_BYTES.
_DENSE_CELLS_PER_TAP = 3
_DENSE_BYTES = 256 * 1024


def small_map_layer(x_shape, w, bias, activation, begin, end, strides, dilations, out_shape, dtype):
    """The layer for a 2-D depthwise convolution (one output per channel, ``w`` ``(C, 1, kh,
    kw)``) where one of this module's forms pays, else None."""
    channels, height, width = x_shape[1:]
    kernel = w.shape[2:]
    if min(out_shape) <= 0:
        return None
    cells = height * width
    if (cells * _DENSE_CELLS_PER_TAP <= kernel[0] * kernel[1]
            and cells * out_shape[0] * out_shape[1] * channels * np.dtype(dtype).itemsize <= _DENSE_BYTES):
        return DepthwiseDense(x_shape, w, bias, activation, begin, strides, dilations, out_shape, dtype)
    if (all(s == 1 for s in strides) and all(d == 1 for d in dilations) and min(kernel) >= _MIN_KERNEL
            and height + width <= _REACH * min(kernel) and cells * kernel[0] * out_shape[1] >= _MIN_CHANNEL_WORK):
        return DepthwiseProducts(x_shape, w, bias, activation, begin, out_shape, dtype)
    return None


class DepthwiseDense:
    """The dense form (module docstring) for one input shape, attributes and weights:
    ``layer(X, allocate) -> Y``, ``Y`` channels-last."""

    def __init__(self, x_shape, w: np.ndarray, bias, activation, begin, strides, dilations, out_shape, dtype):
        batch, channels, height, width = x_shape
        kernel_h, kernel_w = w.shape[2:]
        out_h, out_w = out_shape
        w = np.asarray(w, dtype)
        # M[p, o, c]: the tap of output o that reads input p (taps reach distinct cells).
        dense = np.zeros((height, width, out_h, out_w, channels), dtype)
        for oh in range(out_h):
            for ow in range(out_w):
                for i in range(kernel_h):
                    h = oh * strides[0] - begin[0] + i * dilations[0]
                    for j in range(kernel_w):
                        v = ow * strides[1] - begin[1] + j * dilations[1]
                        if 0 <= h < height and 0 <= v < width:
                            dense[h, v, oh, ow] = w[:, 0, i, j]
        self.dense = dense.reshape(height * width, out_h * out_w, channels)
        self.cells_shape = (batch, height * width, channels)
        self.image_shape = (batch, height, width, channels)
        self.storage_shape = (batch, out_h, out_w, channels)
        self.rows_shape = (batch, out_h * out_w, channels)
        self.bias = None if bias is None else np.asarray(bias, dtype)
        self.finish = None if activation is None else activations.into(*activation, dtype)
        self.dtype = np.dtype(dtype)

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        cells = x.transpose(0, 2, 3, 1)
        if not cells.flags.c_contiguous:  # channels-first: copied channels-last (a small map)
            image = allocate(self.image_shape, self.dtype)
            np.copyto(image, cells)
            cells = image
        storage = allocate(self.storage_shape, self.dtype)
        rows = storage.reshape(self.rows_shape)
        np.einsum("npc,poc->noc", cells.reshape(self.cells_shape), self.dense, out=rows)
        if self.bias is not None:
            np.add(rows, self.bias, out=rows)
        if self.finish is not None:
            self.finish(storage, storage)
        return storage.transpose(0, 3, 1, 2)


class DepthwiseProducts:
    """The two-products form (module docstring) for one input shape, attributes and weights:
    the banded matrices per channel and the shared row selection built once
    (``layer(X, allocate) -> Y``, ``Y`` channels-last)."""

    def __init__(self, x_shape, w: np.ndarray, bias, activation, begin, out_shape, dtype):
        self.batch, channels, height, width = x_shape
        kernel_h, kernel_w = w.shape[2:]
        top, left = begin
        out_h, out_w = out_shape
        w = np.asarray(w, dtype)
        # T[c, v, i, ow] = w[c, i, v - ow + left] where that column exists.
        banded = np.zeros((channels, width, kernel_h, out_w), dtype)
        for ow in range(out_w):
            for j in range(kernel_w):
                v = ow - left + j
                if 0 <= v < width:
                    banded[:, v, :, ow] = w[:, 0, :, j]
        self.banded = banded.reshape(channels, width, kernel_h * out_w)
        # S[oh, h, i] = 1 where input row h = oh - top + i exists.
        rows = np.zeros((out_h, height, kernel_h), dtype)
        for oh in range(out_h):
            for i in range(kernel_h):
                h = oh - top + i
                if 0 <= h < height:
                    rows[oh, h, i] = 1
        self.rows = rows.reshape(out_h, height * kernel_h)
        self.across_shape = (self.batch, channels, height, kernel_h * out_w)
        self.down_view = (self.batch, channels, height * kernel_h, out_w)
        self.out_shape = (self.batch, channels, out_h, out_w)
        self.storage_shape = (self.batch, out_h, out_w, channels)
        self.bias = None if bias is None else np.asarray(bias, dtype)
        self.finish = None if activation is None else activations.into(*activation, dtype)
        self.dtype = np.dtype(dtype)

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        if not x.flags.c_contiguous:  # channels-last: the products read channels-first planes
            image = allocate(x.shape, self.dtype)
            np.copyto(image, x)
            x = image
        across = allocate(self.across_shape, self.dtype)
        np.matmul(x, self.banded, out=across)
        down = allocate(self.out_shape, self.dtype)
        np.matmul(self.rows, across.reshape(self.down_view), out=down)
        del across
        storage = allocate(self.storage_shape, self.dtype)
        planes = down.transpose(0, 2, 3, 1)
        if self.bias is not None:
            np.add(planes, self.bias, out=storage)
        else:
            np.copyto(storage, planes)
        if self.finish is not None:
            self.finish(storage, storage)
        return storage.transpose(0, 3, 1, 2)
