"""The Conv layers that are one GEMM per call: pointwise convolutions and 2-D convolutions of small
images (see :mod:`lite.ops.conv`, which picks the path).

https://onnx.ai/onnx/operators/onnx__Conv.html

- :class:`Pointwise`: 1x1, stride 1, no padding, one group: the input *is* the im2col matrix;
- :class:`StridedPointwise`: 1x1, strided, no padding, one group: the sampled pixels copied
  out, then one GEMM;
- :class:`Im2col`: the whole im2col matrix of a small image copied at once, then one GEMM;
- :class:`Rows`: a 1-D convolution run by a 2-D layer over images one row high.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from lite.ops import _parallel as parallel
from lite.ops import fused_activation as activations
from lite.ops._conv_common import PlanesToRows, transposes_through_pitch
from lite.ops._helpers import full_operand
from lite.ops._layout import channels_first_order, channels_last_order, is_channels_last
from lite.ops.registry import SMALL_ARRAY_BYTES

# A 2-D convolution whose whole im2col matrix fits this is one copy and one GEMM (see Im2col).
_WHOLE_COLUMNS_BYTES = 1 << 20
# A layer whose scratch is at most this big keeps one per thread instead of asking for it on
# every call (see Im2col).
_KEPT_SCRATCH_BYTES = 256 * 1024
# The channels-last im2col matrix (see Im2col) for channels-first inputs of at most this many
# pixels with at least this many channels.
_ROWS_MAX_PIXELS = 256
_ROWS_MIN_CHANNELS = 16
# A pointwise convolution of a channels-last input writes channels-last from this many pixels on;
# on smaller images (MobileNet's 7x7) the channels-first GEMM (pixels as BLAS's leading
# dimension) is faster, and the depthwise convolution after it transposes a small image.
_CHANNELS_LAST_MIN_PIXELS = 64
# The channels-last im2col matrix's GEMM computes ``columns @ W'^T`` (pixels, M) and transposes
# it into the output for outputs of this many pixels (bounds included) and output channels at
# least (see Im2col).
_TRANSPOSED_PIXELS = (32, 128)
_TRANSPOSED_MIN_CHANNELS = 32
# OpenBLAS (0.3.31, AVX-512) multiplies products of at most about a million multiply-adds without
# packing its operands; a larger one of a 2x2 output (N <= 4: the packing is most of it) is cut
# into blocks of output channels below that (see Im2col).
_UNPACKED_MULTIPLY_ADDS = 1_000_000
_UNPACKED_MAX_PIXELS = 4


class Pointwise:
    """A 1x1 convolution with stride 1, no padding and one group: a GEMM, then the bias and the
    activation in place. A channels-first input is ``(N, C, pixels)``, one GEMM ``W @ X`` for
    the whole batch; a channels-last one is the matrix ``(N * pixels, C)`` and, on all but
    small images, ``X @ W^T`` writes the output channels-last too (see :mod:`lite.ops._layout`).

    A layer with more output than input channels (an inverted residual's expansion), unless
    small, adds the bias in the GEMM: the input copied beside a row (or column) of ones, the bias beside the
    weights. The copy is of the smaller side, and the pass over the larger output is saved."""

    def __init__(self, x, w, bias, activation):
        batch, channels = x.shape[:2]
        spatial = tuple(x.shape[2:])
        pixels = math.prod(spatial)
        out_channels = w.shape[0]
        self.matrix = w.reshape(out_channels, channels)
        self.channels_last = is_channels_last(x)
        self.rows = self.channels_last and pixels >= _CHANNELS_LAST_MIN_PIXELS
        self.order = channels_last_order(x.ndim)
        self.back = channels_first_order(x.ndim)
        self.channels = channels
        self.sizes = (batch, channels, pixels)
        self.storage_shape = (batch, *spatial, out_channels) if self.rows else (batch, out_channels, pixels)
        # Outputs below the arena's floor: numpy's allocator directly, without the pool's call.
        self.small = math.prod(self.storage_shape) * w.dtype.itemsize < SMALL_ARRAY_BYTES
        self.y_shape = (batch, out_channels, *spatial)
        # Products large enough to be split between threads on a busy machine (lite.ops._parallel).
        self.split = out_channels * channels * pixels * (batch if self.rows else 1) >= parallel.SPLIT_MULTIPLY_ADDS
        # Below about 16 KiB of output the add (of a full-shape bias) costs less than the copy.
        self.fold = bias is not None and out_channels > channels and math.prod(self.storage_shape) * w.dtype.itemsize > 16384
        if self.fold:
            if self.rows:
                self.folded = np.concatenate([self.matrix.T, bias[None, :]])  # (C + 1, M)
                self.augmented_shape = (batch * pixels, channels + 1)
            else:
                self.folded = np.concatenate([self.matrix, bias[:, None]], axis=1)  # (M, C + 1)
                self.augmented_shape = (batch, channels + 1, pixels)
            self.keeps_scratch = math.prod(self.augmented_shape) * w.dtype.itemsize <= _KEPT_SCRATCH_BYTES
            self._local = threading.local()
            bias = None
        self.bias = None if bias is None else full_operand(bias if self.rows else bias.reshape(out_channels, 1),
                                                           (batch * pixels, out_channels) if self.rows else
                                                           (batch, out_channels, pixels))
        self.activate = None if activation is None else activations.in_place(*activation, w.dtype)

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        y = (np.empty if self.small else allocate)(self.storage_shape, x.dtype)
        if self.rows:
            product, a, b = y.reshape(-1, self.matrix.shape[0]), x.transpose(self.order).reshape(-1, self.channels), self.matrix.T
        else:
            batch, channels, pixels = self.sizes
            if self.channels_last:
                # (N, C, pixels) as a transposed view of the (N, pixels, C) rows: matmul reads it as is.
                b = x.transpose(self.order).reshape(batch, pixels, channels).transpose(0, 2, 1)
            else:
                b = x.reshape(self.sizes)
            product, a = y, self.matrix
        if self.fold:
            augmented = self._augmented(x.dtype, allocate)
            if self.rows:
                np.copyto(augmented[:, : self.channels], a)
                a, b = augmented, self.folded
            else:
                np.copyto(augmented[:, : self.channels], b)
                a, b = self.folded, augmented
        if not self.split:
            np.matmul(a, b, out=product)
        elif self.rows:
            parallel.matmul(a, b, product)
        else:
            for n in range(product.shape[0]):
                parallel.matmul(a, b[n], product[n])
        if self.bias is not None:
            np.add(product, self.bias, out=product)
        if self.activate is not None:
            self.activate(product)
        return y.transpose(self.back) if self.rows else y.reshape(self.y_shape)

    def _augmented(self, dtype, allocate) -> np.ndarray:
        """The input's copy beside ones: this thread's, its ones set once, where small."""
        if self.keeps_scratch:
            augmented = getattr(self._local, "augmented", None)
            if augmented is not None and augmented.dtype == dtype:
                return augmented
        augmented = (np.empty if self.keeps_scratch else allocate)(self.augmented_shape, dtype)
        augmented[:, self.channels] = 1  # the column (rows) or the row (channels-first) of ones
        if self.keeps_scratch:
            self._local.augmented = augmented
        return augmented

class StridedPointwise:
    """A strided 1x1 convolution (no padding, one group: ResNet's downsampling shortcuts) of a
    channels-first input: per image the sampled pixels copied into a ``(C, pixels)`` matrix, one
    GEMM by the weights, then the bias and the activation in place. The Im2col layer transposed
    the image into a channels-last buffer first; this copy is a quarter of the image, and the
    GEMM the same: 0.7-0.9x the time on a 64x64 ResNet's shortcuts ((512, 8, 8) -> 1024
    channels: 400 -> 284 µs). The bias stays out of the GEMM: as a 513th column of the
    weights (rows no longer 16-byte aligned) that GEMM took 1.4x as long."""

    def __init__(self, x, w, bias, activation, strides, out_shape):
        batch, channels = x.shape[:2]
        out_channels = w.shape[0]
        pixels = math.prod(out_shape)
        self.matrix = w.reshape(out_channels, channels)
        self.sample = (slice(None),) + tuple(slice(None, (out - 1) * stride + 1, stride)
                                             for out, stride in zip(out_shape, strides))
        self.columns_shape = (channels, *out_shape)
        self.product_shape = (batch, out_channels, pixels)
        self.y_shape = (batch, out_channels, *out_shape)
        item = w.dtype.itemsize
        self.small = math.prod(self.product_shape) * item < SMALL_ARRAY_BYTES  # see Pointwise
        self.split = out_channels * channels * pixels >= parallel.SPLIT_MULTIPLY_ADDS
        self.bias = None if bias is None else bias.reshape(out_channels, 1)
        self.activate = None if activation is None else activations.in_place(*activation, w.dtype)

    @staticmethod
    def suits(x, group, kernel_dims, begin, end, strides) -> bool:
        return (group == 1 and all(k == 1 for k in kernel_dims) and not any(begin) and not any(end)
                and any(s > 1 for s in strides) and not is_channels_last(x))

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        y = (np.empty if self.small else allocate)(self.product_shape, x.dtype)
        sampled = allocate(self.columns_shape, x.dtype)
        columns = sampled.reshape(self.columns_shape[0], -1)
        for n in range(x.shape[0]):
            np.copyto(sampled, x[n][self.sample])
            if self.split:
                parallel.matmul(self.matrix, columns, y[n])
            else:
                np.matmul(self.matrix, columns, out=y[n])
        del sampled, columns
        if self.bias is not None:
            np.add(y, self.bias, out=y)
        if self.activate is not None:
            self.activate(y)
        return y.reshape(self.y_shape)


class Im2col:
    """A 2-D convolution whose whole im2col matrix fits ``_WHOLE_COLUMNS_BYTES`` (small images: a
    64x64 model's layers): per image, the input copied into a zeroed padded buffer, the windows
    copied out of it in one go as the column matrix, one GEMM into the output, then the bias and
    the activation in place over the whole output. The windows are a view built from
    precomputed strides; the block paths (lite.ops._conv_blocks) rebuild theirs and loop over blocks of rows.

    Two layouts of the matrix. Channels-first, ``(groups, C/g * kh * kw, pixels)`` from a
    ``(C, H, W)`` buffer: a window row is ``out_w`` cells, so on small maps the copy is mostly
    numpy's per-row overhead (a third of a 4x4 map's 3x3 convolution). Channels-last (one
    group), ``(pixels, kh * kw * C)`` from an ``(H, W, C)`` buffer: a window row is ``kw * C``
    contiguous cells, and the GEMM ``W' @ columns^T`` reads the matrix transposed. That one is
    used for channels-last inputs and for small maps with enough channels (the buffer's fill
    then transposes a small image).

    OpenBLAS (0.3.31, AVX-512) multiplies by that transposed matrix slowly on some shapes:
    ``W' @ columns^T`` of an 8x8 output's 3x3 convolution ran 1.1-1.9x as long as
    ``columns @ W'^T`` with the weights stored transposed (64 -> 64 channels: 61 against 48 µs).
    For outputs of ``_TRANSPOSED_PIXELS`` pixels and at least ``_TRANSPOSED_MIN_CHANNELS``
    channels the GEMM is the latter, into a ``(pixels, M)`` scratch that the activation (or a
    copy) then transposes into the output in one pass: 0.72-0.94x the layer's time (32 -> 32
    channels, 16x16 stride 2: 0.72-0.79x). With 16 output channels, on 4x4 outputs (16 pixels)
    and on 15x15 ones it ran 1.01-1.14x as long: there the GEMM is ``W' @ columns^T``.

    On a 2x2 output (4 columns) OpenBLAS packs the weights of a large product, most of its time:
    blocks of output channels of at most ``_UNPACKED_MULTIPLY_ADDS`` each, which it multiplies
    unpacked, ran 0.58-0.66x as long (256 -> 256 channels, 3x3: 400 against 262 µs on a loaded
    machine, 0.86-0.91x on a quiet one; ResNet-18 0.96x)."""

    def __init__(self, x, w, bias, activation, kernel_dims, begin, end, strides, dilations, out_shape, group):
        batch, channels, height, width = x.shape
        out_channels = w.shape[0]
        kernel_h, kernel_w = kernel_dims
        pixels = math.prod(out_shape)
        padded_h, padded_w = height + begin[0] + end[0], width + begin[1] + end[1]
        self.rows = group == 1 and (is_channels_last(x) or (channels >= _ROWS_MIN_CHANNELS
                                                             and height * width <= _ROWS_MAX_PIXELS))
        item = w.dtype.itemsize  # the compute dtype's (x may be narrower)
        depth = channels // group * kernel_h * kernel_w
        # One group: the bias is a column of the weights, multiplied by a row of ones kept in
        # the column matrix (set when the matrix is made), and the GEMM adds it.
        self.fold = bias is not None and group == 1
        if self.rows:
            self.matrix = w.transpose(0, 2, 3, 1).reshape(out_channels, -1)
            self.padded_shape = (padded_h, padded_w, channels)
            self.interior = (slice(begin[0], begin[0] + height), slice(begin[1], begin[1] + width))
            row, column = padded_w * channels * item, channels * item
            self.window_shape = (*out_shape, kernel_h, kernel_w, channels)
            self.window_strides = (strides[0] * row, strides[1] * column, dilations[0] * row, dilations[1] * column,
                                   item)
            self.columns_shape = (pixels, depth + self.fold)
            self.windows = (slice(None), slice(0, depth))  # the columns' cells the windows fill
            self.ones = (slice(None), depth)
            self.product_shape = (batch, out_channels, pixels)
            self.order = (1, 2, 0)  # an image (C, H, W) as (H, W, C)
            contiguous = is_channels_last(x) if x.ndim == 4 else False
            self.transposed = (_TRANSPOSED_PIXELS[0] <= pixels <= _TRANSPOSED_PIXELS[1]
                               and out_channels >= _TRANSPOSED_MIN_CHANNELS)
            # Blocks of output channels, each an unpacked product; None: one product.
            block = _UNPACKED_MULTIPLY_ADDS // ((depth + 1) * pixels) // 16 * 16
            self.block = (block if pixels <= _UNPACKED_MAX_PIXELS and 16 <= block < out_channels
                          else None)
        else:
            self.matrix = w.reshape(group, out_channels // group, -1)
            self.padded_shape = (channels, padded_h, padded_w)
            self.interior = (slice(None), slice(begin[0], begin[0] + height), slice(begin[1], begin[1] + width))
            plane, row = padded_h * padded_w * item, padded_w * item
            self.window_shape = (channels, *kernel_dims, *out_shape)
            self.window_strides = (plane, dilations[0] * row, dilations[1] * item, strides[0] * row, strides[1] * item)
            self.columns_shape = (group, depth + self.fold, pixels)
            self.windows = (slice(None), slice(0, depth))
            self.ones = (slice(None), depth)
            self.product_shape = (batch, group, out_channels // group, pixels)
            self.order = (0, 1, 2)
            contiguous = x.flags.c_contiguous
            self.transposed = False
        # The image is copied into a buffer when it needs padding or is not laid out as the
        # view below needs (a view is built on a contiguous buffer).
        self.copy = any(begin) or any(end) or not contiguous
        if self.fold:
            matrix = self.matrix.reshape(out_channels, depth)
            self.matrix = np.concatenate([matrix, bias.reshape(out_channels, 1)], axis=1)
            if not self.rows:
                self.matrix = self.matrix.reshape(1, out_channels, depth + 1)
            bias = None
        # (depth [+ 1], M): the weights of the transposed GEMM.
        self.matrix_t = np.ascontiguousarray(self.matrix.T) if self.transposed else None
        self.split = group == 1 and out_channels * depth * pixels >= parallel.SPLIT_MULTIPLY_ADDS
        self.y_shape = (batch, out_channels, *out_shape)
        self.small = math.prod(self.product_shape) * item < SMALL_ARRAY_BYTES  # see Pointwise
        self.bias = None if bias is None else full_operand(bias.reshape(out_channels, 1), (batch, out_channels, pixels))
        self.activate = None if activation is None else activations.in_place(*activation, w.dtype)
        # The transposed product's pass into the output: the activation, or a copy.
        self.finish = None
        if self.transposed:
            self.finish = _copy if activation is None else activations.into(*activation, w.dtype)
            self.transposed_shape = (pixels, out_channels)
            self.activate = None
        # Small scratch that needs a copy of the input anyway: each thread keeps its own (the
        # padded buffer's border is zeroed once; a call writes its interior and the columns).
        scratch = (math.prod(self.columns_shape) + math.prod(self.padded_shape)) * item
        self.keeps_scratch = self.copy and scratch <= _KEPT_SCRATCH_BYTES
        self._local = threading.local()
        # A channels-first image filling the channels-last buffer: transposed through pitched
        # planes where that is faster (see lite.ops._conv_common.PlanesToRows).
        self.to_rows = None
        if self.rows and x.flags.c_contiguous and transposes_through_pitch(channels, height, width, item):
            self.to_rows = PlanesToRows(channels, height, width)

    @staticmethod
    def suits(x, w, group, begin, end, out_shape) -> bool:
        if x.ndim != 4 or min(begin + end) < 0 or min(out_shape) < 1:
            return False
        return x.shape[1] * w.shape[2] * w.shape[3] * math.prod(out_shape) * w.dtype.itemsize <= _WHOLE_COLUMNS_BYTES

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        y = (np.empty if self.small else allocate)(self.product_shape, x.dtype)
        if self.keeps_scratch:
            scratch = getattr(self._local, "scratch", None)
            if scratch is None or scratch[0].dtype != x.dtype:
                scratch = self._local.scratch = self._scratch(x.dtype)
            columns, windows, padded, view = scratch
        else:
            columns = allocate(self.columns_shape, x.dtype)
            if self.fold:
                columns[self.ones] = 1
            windows = columns[self.windows].reshape(self.window_shape)
            padded = allocate(self.padded_shape, x.dtype) if self.copy else None
            view = None
        to_rows = self.to_rows if x.flags.c_contiguous else None
        planes = None if to_rows is None else allocate((x.shape[1], to_rows.pitch), x.dtype)
        for n in range(x.shape[0]):
            image = x[n].transpose(self.order)
            if view is None:
                if padded is not None:
                    padded.fill(0)
                    self._fill(padded[self.interior], x[n], image, to_rows, planes)
                    image = padded
                np.copyto(windows, np.ndarray(self.window_shape, x.dtype, image, 0, self.window_strides))
            else:
                self._fill(padded[self.interior], x[n], image, to_rows, planes)
                np.copyto(windows, view)
            if self.transposed:
                product = allocate(self.transposed_shape, x.dtype)
                if self.split:
                    parallel.matmul(columns, self.matrix_t, product)
                else:
                    np.matmul(columns, self.matrix_t, out=product)
                self.finish(product.T, y[n])
                del product
            elif self.rows:
                if self.split:
                    parallel.matmul(self.matrix, columns.T, y[n])
                elif self.block is not None:
                    for first in range(0, self.matrix.shape[0], self.block):
                        np.matmul(self.matrix[first:first + self.block], columns.T, out=y[n, first:first + self.block])
                else:
                    np.matmul(self.matrix, columns.T, out=y[n])
            elif self.split:
                parallel.matmul(self.matrix[0], columns[0], y[n, 0])
            else:
                np.matmul(self.matrix, columns, out=y[n])
        del padded, columns, windows, view, planes
        # The pixel count spelled out: numpy cannot infer -1 for a batch of 0.
        y = y.reshape(self.y_shape[0], self.y_shape[1], math.prod(self.y_shape[2:]))
        if self.bias is not None:
            np.add(y, self.bias, out=y)
        if self.activate is not None:
            self.activate(y)
        return y.reshape(self.y_shape)

    @staticmethod
    def _fill(interior: np.ndarray, x_image: np.ndarray, image: np.ndarray, to_rows, planes) -> None:
        """The padded buffer's interior := the image in the buffer's layout."""
        if to_rows is not None:
            to_rows(x_image, interior, planes)
        else:
            np.copyto(interior, image)

    def _scratch(self, dtype):
        """This thread's column matrix (its row of ones set), the cells of it the windows fill,
        the zeroed padded buffer (only its interior is ever written) and the windows view of it."""
        columns = np.empty(self.columns_shape, dtype)
        if self.fold:
            columns[self.ones] = 1
        padded = np.zeros(self.padded_shape, dtype)
        view = np.ndarray(self.window_shape, dtype, padded, 0, self.window_strides)
        view.flags.writeable = False
        return columns, columns[self.windows].reshape(self.window_shape), padded, view

def _copy(x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, x)


class Rows:
    """A 1-D convolution computed by a 2-D layer on its input as images one row high."""

    def __init__(self, layer):
        self.layer = layer

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        y = self.layer(x[:, :, None], allocate)
        return y.reshape(y.shape[0], y.shape[1], y.shape[3])
