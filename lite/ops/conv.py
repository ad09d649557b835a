"""Conv: N-d convolution with groups, dilations, strides and padding.

https://onnx.ai/onnx/operators/onnx__Conv.html

Four paths, picked by shape, all computing the same thing:

- pointwise (every kernel extent 1): the input *is* the im2col matrix, so one GEMM per image,
  ``W (M, C) @ X (C, H*W)``, or for a channels-last input (see :mod:`lite.ops._layout`) on all
  but small images ``X (H*W, C) @ W^T`` with the output channels-last too: no copy beyond an
  optional stride subsample;
- depthwise (group == input channels): sums of shifted elementwise products, channels-last
  (one einsum per column phase) or over tap slices (see :mod:`lite.ops._depthwise`);
- 3x3 stride 1 with enough channels, when the engine prepared the weights at load (see
  ``prepare_conv``): Winograd F(2x2, 3x3), 2.25x fewer multiplications (see
  :mod:`lite.ops._winograd`);
- general: im2col as a strided view of the padded input laid out ``(C, *kernel, *out)``, copied
  a block of output rows at a time into a buffer of at most ``_COLUMNS_BYTES``, then one GEMM
  ``W (M/g, C/g*K) @ cols (C/g*K, rows*W)`` per block that writes straight into the NCHW output;
  for 2-D images where it costs few extra columns, on a wide grid whose tap rows are contiguous
  (see :mod:`lite.ops._wide_im2col`).

Bias and the node's fused activation (keyword-only ``fused_activation``, see
:mod:`lite.ops.registry`) are applied to each block of the output right after its GEMM, while it
is still in cache, instead of in separate passes over the whole tensor.

Everything but the data is decided once per input shape, layout and dtype: a *layer* (the
callable ``layer(X, allocate) -> Y`` that :func:`_layer` builds) holds the resolved attributes,
the path and what it precomputes. For constant weights the engine's ``prepare`` hook gives the
kernel a :class:`PreparedConv` that keeps the layers between calls; on a small model (64x64
MobileNets, 1-2 µs per numpy call) resolving attributes and picking the path on every call was
most of a convolution's time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops import _parallel as parallel
from lite.ops import _wide_im2col as wide_im2col
from lite.ops import _winograd as winograd
from lite.ops import fused_activation as activations
from lite.ops._conv_common import (
    compute_dtype,
    output_shape,
    pad_input,
    resolve_pads,
    spatial_defaults,
    windows,
)
from lite.ops._depthwise import depthwise_layer, depthwise_taps
from lite.ops._helpers import full_operand
from lite.ops._layout import channels_first_order, channels_last_order, is_channels_last
from lite.ops.registry import SMALL_ARRAY_BYTES, kernel

# im2col columns per GEMM: at most this many bytes (the scratch stays bounded on big images),
# but at least _MIN_GEMM_COLUMNS output pixels, below which the GEMM slows down markedly; a
# layer whose whole im2col matrix fits runs as one GEMM.
_COLUMNS_BYTES = 1 << 20
_MIN_GEMM_COLUMNS = 512
# A 2-D convolution whose whole im2col matrix fits this is one copy and one GEMM (see _Im2col).
_WHOLE_COLUMNS_BYTES = 1 << 20
# A layer whose scratch is at most this big keeps one per thread instead of asking for it on
# every call (see _Im2col).
_KEPT_SCRATCH_BYTES = 256 * 1024
# The channels-last im2col matrix (see _Im2col) for channels-first inputs of at most this many
# pixels with at least this many channels.
_ROWS_MAX_PIXELS = 256
_ROWS_MIN_CHANNELS = 16
# A grouped convolution whose im2col columns (all groups) fit this runs as one batched GEMM.
_GROUPED_COLUMNS_BYTES = 1 << 20
# A pointwise convolution of a channels-last input writes channels-last from this many pixels on;
# on smaller images (MobileNet's 7x7) the channels-first GEMM (pixels as BLAS's leading
# dimension) is faster, and the depthwise convolution after it transposes a small image.
_CHANNELS_LAST_MIN_PIXELS = 64


def prepare_conv(constants, shapes, *, auto_pad="NOTSET", group=1, kernel_shape=None, pads=None, strides=None,
                 dilations=None, **_):
    """Load-time work for constant weights (the ``prepare`` hook of lite.ops.registry): a
    :class:`PreparedConv` holding them, with the Winograd transform of 3x3 stride-1 kernels
    applied to images large enough to gain from it. Attributes it cannot read (a damaged model)
    prepare nothing: the kernel reports them when run."""
    weights = constants[1] if len(constants) > 1 else None
    if not isinstance(weights, np.ndarray) or weights.ndim < 3 or weights.dtype.kind != "f":
        return None
    rank = weights.ndim - 2
    attributes = [kernel_shape or list(weights.shape[2:]), pads or [0] * 2 * rank, strides or [1] * rank,
                  dilations or [1] * rank]
    if not isinstance(group, int) or not all(_ints(value) for value in attributes) or not isinstance(auto_pad, str):
        return None
    bias = constants[2] if len(constants) > 2 else None
    bias_known = len(constants) < 3 or isinstance(bias, np.ndarray)
    return PreparedConv(weights, bias, bias_known, _prepare_winograd(weights, shapes, auto_pad, group, *attributes))


def _prepare_winograd(weights, shapes, auto_pad, group, kernel, pads, strides, dilations):
    if not winograd.suits(weights.shape, group, kernel, strides, dilations):
        return None
    spatial = (shapes[0] or ())[2:]
    if len(spatial) == 2 and all(isinstance(size, int) for size in spatial):
        # Declared sizes: prepare only what the kernel will use (3x3, stride 1: out = in + pads - 2).
        begin, end = resolve_pads("Conv", auto_pad, pads, spatial, [3, 3], [1, 1], [1, 1])
        if not winograd.fits(weights.shape[1], weights.shape[0], output_shape(spatial, [3, 3], [1, 1], [1, 1], begin, end)):
            return None
    dtype = np.float64 if weights.dtype == np.float64 else np.float32
    return winograd.transform_weights(weights, dtype)


def _ints(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value)


class PreparedConv:
    """A Conv node's constant weights (and bias, when constant too) as the engine prepared them,
    and the layers built from them: one :class:`_Layer`-like callable per input shape, layout,
    dtype and fused activation seen, everything about the call but the data decided when it
    was built (at most ``_LAYERS``; the engine's per-call overhead was most of a small
    model's convolutions)."""

    def __init__(self, weights: np.ndarray, bias: np.ndarray | None, bias_known: bool,
                 winograd_weights: np.ndarray | None):
        self.weights = weights
        self.bias = bias
        self.bias_known = bias_known  # False: the bias is computed at run time
        self.winograd = winograd_weights
        self.layers: dict[tuple, Callable] = {}

    def remember(self, key: tuple, layer: Callable) -> Callable:
        if len(self.layers) >= _LAYERS:
            self.layers.clear()
        self.layers[key] = layer
        return layer


# Layers one prepared node keeps (a server sees a few input shapes).
_LAYERS = 16


@kernel("Conv", since=1, prepare=prepare_conv)
def Conv(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
    fused_activation=None,
    prepared=None,
    allocate=np.empty,
):
    """Y = conv(X, W) + B, X ``(N, C, *spatial)``, W ``(M, C/group, *kernel)``."""
    attributes = (auto_pad, dilations, group, kernel_shape, pads, strides)
    if prepared is None:
        return _layer(X, W, B, *attributes, fused_activation, None)(X, allocate)
    if not prepared.bias_known:
        return _layer(X, prepared.weights, B, *attributes, fused_activation, prepared.winograd)(X, allocate)
    key = (X.shape, X.strides, X.dtype, fused_activation)
    layer = prepared.layers.get(key)
    if layer is None:
        layer = _layer(X, prepared.weights, prepared.bias, *attributes, fused_activation, prepared.winograd)
        layer = prepared.remember(key, layer)
    return layer(X, allocate)


def _layer(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides, activation, transformed):
    """The callable ``layer(X, allocate) -> Y`` computing this convolution for inputs shaped and
    laid out as ``X``: attributes resolved, the path picked by shape."""
    dtype = compute_dtype(X)
    x_shape = X.shape
    w = np.asarray(W, dtype=dtype)
    channels = x_shape[1] if len(x_shape) > 1 else 0
    out_channels = w.shape[0]
    if len(x_shape) < 3 or w.ndim != len(x_shape) or channels != w.shape[1] * group or out_channels % group:
        raise UnsupportedOpError(
            f"Conv: input {tuple(x_shape)} and weight {w.shape} do not match for group={group} "
            "(expected X (N, C, ...), W (M, C/group, ...) with M divisible by group)"
        )
    spatial = x_shape[2:]
    kernel_dims, strides, dilations = spatial_defaults(
        "Conv", spatial, kernel_shape if kernel_shape else w.shape[2:], strides, dilations
    )
    begin, end = resolve_pads("Conv", auto_pad, pads, spatial, kernel_dims, strides, dilations)
    out_shape = output_shape(spatial, kernel_dims, strides, dilations, begin, end)
    bias = None if B is None else np.asarray(B, dtype=dtype)
    # The activation acts on the output dtype: fused into the blocks only when no cast follows.
    block_activation = activation if X.dtype == dtype else None
    plain = not any(begin) and not any(end) and all(s == 1 for s in strides)
    if group == channels and group > 1:
        if len(x_shape) == 4 and out_channels == channels:
            layer = depthwise_layer(x_shape, w, bias, block_activation, begin, end, strides, dilations, out_shape,
                                    dtype)
        else:
            layer = _Direct("depthwise taps", w, bias, block_activation, begin, end, strides, dilations, out_shape,
                            group, kernel_dims)
    elif (
        transformed is not None
        and transformed.dtype == dtype
        and transformed.shape[1:] == (out_channels, channels)
        and winograd.suits(w.shape, group, kernel_dims, strides, dilations)
        and winograd.fits(channels, out_channels, out_shape)
    ):
        layer = _Direct("winograd", transformed, bias, block_activation, begin, end, strides, dilations, out_shape,
                        group, kernel_dims)
    elif plain and group == 1 and all(k == 1 for k in kernel_dims):
        layer = _Pointwise(X, w, bias, block_activation)
    elif _Im2col.suits(X, w, group, begin, end, out_shape):
        layer = _Im2col(X, w, bias, block_activation, kernel_dims, begin, end, strides, dilations, out_shape, group)
    elif len(x_shape) == 3 and _Im2col.suits(X[:, :, None], w[:, :, None], group, [0, *begin], [0, *end], [1, *out_shape]):
        # 1-D (audio front ends): the 2-D layer over images one row high.
        layer = _Rows(_Im2col(X[:, :, None], w[:, :, None], bias, block_activation, [1, *kernel_dims], [0, *begin],
                              [0, *end], [1, *strides], [1, *dilations], [1, *out_shape], group))
    else:
        layer = _Direct(_direct_path(X, w, group, kernel_dims, begin, end, strides, out_shape), w, bias,
                        block_activation, begin, end, strides, dilations, out_shape, group, kernel_dims)
    if X.dtype == dtype and (activation is None or block_activation is not None):
        return layer
    return _Cast(layer, dtype, activation if block_activation is None else None)


def _direct_path(x, w, group, kernel_dims, begin, end, strides, out_shape) -> str:
    """The path of a convolution that is neither depthwise, Winograd nor a plain pointwise one."""
    if all(k == 1 for k in kernel_dims):
        return "pointwise"
    if group > 1 and x.shape[1] * math.prod(kernel_dims) * math.prod(out_shape) * w.itemsize <= _GROUPED_COLUMNS_BYTES:
        return "grouped"
    if wide_im2col.suits(x, begin, end, strides, out_shape):
        return "wide"
    return "im2col"


class _Pointwise:
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
        self.activate = None if activation is None else activations.in_place(*activation)

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


class _Im2col:
    """A 2-D convolution whose whole im2col matrix fits ``_WHOLE_COLUMNS_BYTES`` (small images: a
    64x64 model's layers): per image, the input copied into a zeroed padded buffer, the windows
    copied out of it in one go as the column matrix, one GEMM into the output, then the bias and
    the activation in place over the whole output. The windows are a view built from
    precomputed strides; the general paths below rebuild theirs and loop over blocks of rows.

    Two layouts of the matrix. Channels-first, ``(groups, C/g * kh * kw, pixels)`` from a
    ``(C, H, W)`` buffer: a window row is ``out_w`` cells, so on small maps the copy is mostly
    numpy's per-row overhead (a third of a 4x4 map's 3x3 convolution). Channels-last (one
    group), ``(pixels, kh * kw * C)`` from an ``(H, W, C)`` buffer: a window row is ``kw * C``
    contiguous cells, and the GEMM ``W' @ columns^T`` reads the matrix transposed. That one is
    used for channels-last inputs and for small maps with enough channels (the buffer's fill
    then transposes a small image)."""

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
        # The image is copied into a buffer when it needs padding or is not laid out as the
        # view below needs (a view is built on a contiguous buffer).
        self.copy = any(begin) or any(end) or not contiguous
        if self.fold:
            matrix = self.matrix.reshape(out_channels, depth)
            self.matrix = np.concatenate([matrix, bias.reshape(out_channels, 1)], axis=1)
            if not self.rows:
                self.matrix = self.matrix.reshape(1, out_channels, depth + 1)
            bias = None
        self.split = group == 1 and out_channels * depth * pixels >= parallel.SPLIT_MULTIPLY_ADDS
        self.y_shape = (batch, out_channels, *out_shape)
        self.small = math.prod(self.product_shape) * item < SMALL_ARRAY_BYTES  # see _Pointwise
        self.bias = None if bias is None else full_operand(bias.reshape(out_channels, 1), (batch, out_channels, pixels))
        self.activate = None if activation is None else activations.in_place(*activation)
        # Small scratch that needs a copy of the input anyway: each thread keeps its own (the
        # padded buffer's border is zeroed once; a call writes its interior and the columns).
        scratch = (math.prod(self.columns_shape) + math.prod(self.padded_shape)) * item
        self.keeps_scratch = self.copy and scratch <= _KEPT_SCRATCH_BYTES
        self._local = threading.local()

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
        for n in range(x.shape[0]):
            image = x[n].transpose(self.order)
            if view is None:
                if padded is not None:
                    padded.fill(0)
                    padded[self.interior] = image
                    image = padded
                np.copyto(windows, np.ndarray(self.window_shape, x.dtype, image, 0, self.window_strides))
            else:
                np.copyto(padded[self.interior], image)
                np.copyto(windows, view)
            if self.rows:
                if self.split:
                    parallel.matmul(self.matrix, columns.T, y[n])
                else:
                    np.matmul(self.matrix, columns.T, out=y[n])
            elif self.split:
                parallel.matmul(self.matrix[0], columns[0], y[n, 0])
            else:
                np.matmul(self.matrix, columns, out=y[n])
        del padded, columns, windows, view
        y = y.reshape(self.y_shape[0], self.y_shape[1], -1)
        if self.bias is not None:
            np.add(y, self.bias, out=y)
        if self.activate is not None:
            self.activate(y)
        return y.reshape(self.y_shape)

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


class _Rows:
    """A 1-D convolution computed by a 2-D layer on its input as images one row high."""

    def __init__(self, layer):
        self.layer = layer

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        y = self.layer(x[:, :, None], allocate)
        return y.reshape(y.shape[0], y.shape[1], y.shape[3])


class _Direct:
    """The paths that work through the input block by block (Winograd, grouped, wide and plain
    im2col, depthwise taps, strided or padded pointwise), with the attributes resolved once."""

    def __init__(self, path, w, bias, activation, begin, end, strides, dilations, out_shape, group, kernel_dims):
        self.path = path
        self.w = w  # the Winograd transform on that path
        self.bias = bias
        self.activation = activation
        self.finish = _Finish(bias, activation)
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
                                     self.out_shape, _Finish(None, self.activation) if self.fold else self.finish,
                                     allocate, _COLUMNS_BYTES, _MIN_GEMM_COLUMNS, self.bias if self.fold else None)
        else:
            padded = pad_input(x, begin, end, allocate=allocate)
            convolve = _im2col_grouped if path == "grouped" else _im2col
            y = convolve(padded, w, self.group, self.kernel_dims, strides, self.dilations, self.out_shape,
                         self.finish, allocate)
            del padded
        return y.reshape(x.shape[0], self.out_channels, *self.out_shape)


class _Cast:
    """A layer for inputs of a narrower float type: computed in float32, cast back, and the
    activation applied after the cast (on the output's type)."""

    def __init__(self, layer, dtype, activation):
        self.layer = layer
        self.dtype = dtype
        self.activation = activation

    def __call__(self, X: np.ndarray, allocate) -> np.ndarray:
        y = self.layer(np.asarray(X, dtype=self.dtype), allocate).astype(X.dtype, copy=False)
        if self.activation is not None:
            y = activations.apply(y, *self.activation)
        return y


class _Finish:
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
    """1x1 convolutions that are not _Pointwise's (grouped, strided or padded): a GEMM per image
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


