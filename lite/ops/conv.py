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
"""

from __future__ import annotations

import math

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
from lite.ops._depthwise import depthwise_channels_last, depthwise_taps
from lite.ops._layout import channels_last_order, empty_channels_last, is_channels_last
from lite.ops.registry import kernel

# im2col columns per GEMM: at most this many bytes (the scratch stays bounded on big images),
# but at least _MIN_GEMM_COLUMNS output pixels, below which the GEMM slows down markedly; a
# layer whose whole im2col matrix fits runs as one GEMM.
_COLUMNS_BYTES = 1 << 20
_MIN_GEMM_COLUMNS = 512
# A grouped convolution whose im2col columns (all groups) fit this runs as one batched GEMM.
_GROUPED_COLUMNS_BYTES = 1 << 20
# A pointwise convolution of a channels-last input writes channels-last from this many pixels on;
# on smaller images (MobileNet's 7x7) the channels-first GEMM (pixels as BLAS's leading
# dimension) is faster, and the depthwise convolution after it transposes a small image.
_CHANNELS_LAST_MIN_PIXELS = 64


def prepare_conv(constants, shapes, *, auto_pad="NOTSET", group=1, kernel_shape=None, pads=None, strides=None,
                 dilations=None, **_):
    """Load-time work for constant weights (the ``prepare`` hook of lite.ops.registry): the
    Winograd transform of 3x3 stride-1 kernels applied to images large enough to gain from it.
    Attributes it cannot read (a damaged model) prepare nothing: the kernel reports them when run."""
    weights = constants[1] if len(constants) > 1 else None
    if not isinstance(weights, np.ndarray) or weights.ndim != 4 or weights.dtype.kind != "f":
        return None
    attributes = [kernel_shape or list(weights.shape[2:]), pads or [0] * 4, strides or [1, 1], dilations or [1, 1]]
    if not isinstance(group, int) or not all(_ints(value) for value in attributes) or not isinstance(auto_pad, str):
        return None
    if not winograd.suits(weights.shape, group, attributes[0], attributes[2], attributes[3]):
        return None
    spatial = (shapes[0] or ())[2:]
    if len(spatial) == 2 and all(isinstance(size, int) for size in spatial):
        # Declared sizes: prepare only what the kernel will use (3x3, stride 1: out = in + pads - 2).
        begin, end = resolve_pads("Conv", auto_pad, pads, spatial, [3, 3], [1, 1], [1, 1])
        if not winograd.fits(weights.shape[1], weights.shape[0], output_shape(spatial, [3, 3], [1, 1], [1, 1], begin, end)):
            return None
    dtype = np.float64 if weights.dtype == np.float64 else np.float32
    return {"winograd": winograd.transform_weights(weights, dtype)}


def _ints(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value)


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
    dtype = compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    w = np.asarray(W, dtype=dtype)
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    if x.ndim < 3 or w.ndim != x.ndim or channels != w.shape[1] * group or out_channels % group:
        raise UnsupportedOpError(
            f"Conv: input {x.shape} and weight {w.shape} do not match for group={group} "
            "(expected X (N, C, ...), W (M, C/group, ...) with M divisible by group)"
        )
    kernel_dims, strides, dilations = spatial_defaults(
        "Conv", x.shape[2:], kernel_shape if kernel_shape else w.shape[2:], strides, dilations
    )
    begin, end = resolve_pads("Conv", auto_pad, pads, x.shape[2:], kernel_dims, strides, dilations)
    out_shape = output_shape(x.shape[2:], kernel_dims, strides, dilations, begin, end)
    bias = None if B is None else np.asarray(B, dtype=dtype)
    # The activation acts on the output dtype: fused into the blocks only when no cast follows.
    block_activation = fused_activation if X.dtype == dtype else None
    finish = _Finish(bias, block_activation)
    transformed = None if prepared is None else prepared.get("winograd")
    if group == channels and group > 1:
        y = _depthwise(x, w, begin, end, strides, dilations, out_shape, finish, allocate)
    elif (
        transformed is not None
        and transformed.dtype == dtype
        and transformed.shape[1:] == (out_channels, channels)
        and winograd.suits(w.shape, group, kernel_dims, strides, dilations)
        and winograd.fits(channels, out_channels, out_shape)
    ):
        y = winograd.convolve(x, transformed, bias, block_activation, begin, end, out_shape, allocate)
    elif all(k == 1 for k in kernel_dims):
        y = _pointwise(x, w, group, begin, end, strides, out_shape, finish, allocate)
    elif group > 1 and channels * math.prod(kernel_dims) * math.prod(out_shape) * x.itemsize <= _GROUPED_COLUMNS_BYTES:
        padded = pad_input(x, begin, end, allocate=allocate)
        y = _im2col_grouped(padded, w, group, kernel_dims, strides, dilations, out_shape, finish, allocate)
        del padded
    elif wide_im2col.suits(x, begin, end, strides, out_shape):
        # The GEMM adds the bias where the weights are a fraction of the output.
        fold = bias is not None and 4 * w.size < out_channels * math.prod(out_shape)
        y = wide_im2col.convolve(x, w, group, kernel_dims, begin, end, strides, dilations, out_shape,
                                 _Finish(None, block_activation) if fold else finish, allocate,
                                 _COLUMNS_BYTES, _MIN_GEMM_COLUMNS, bias if fold else None)
    else:
        padded = pad_input(x, begin, end, allocate=allocate)
        y = _im2col(padded, w, group, kernel_dims, strides, dilations, out_shape, finish, allocate)
        del padded
    y = y.reshape(batch, out_channels, *out_shape).astype(X.dtype, copy=False)
    if fused_activation is not None and block_activation is None:
        y = activations.apply(y, *fused_activation)
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

    def channels_last(self, block: np.ndarray) -> None:
        """The same for a block ``(pixels, channels)`` holding every channel."""
        if self.bias is not None:
            np.add(block, self.bias, out=block)
        if self.activation is not None:
            activations.apply_into(block, block, *self.activation)


def _pointwise(x, w, group, begin, end, strides, out_shape, finish, allocate):
    plain = not any(begin) and not any(end) and all(s == 1 for s in strides)
    channels_last = plain and is_channels_last(x)
    pixels = math.prod(out_shape)
    if channels_last and group == 1 and pixels >= _CHANNELS_LAST_MIN_PIXELS:
        return _pointwise_channels_last(x, w, finish, allocate)
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


def _pointwise_channels_last(x, w, finish, allocate):
    """A channels-last input is a matrix (N * pixels, C): one GEMM against W^T for the whole
    batch, its output channels-last as well."""
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    rows = x.transpose(channels_last_order(x.ndim)).reshape(-1, channels)  # a view, no copy
    y = empty_channels_last((batch, out_channels) + x.shape[2:], x.dtype, allocate)
    y_rows = y.transpose(channels_last_order(y.ndim)).reshape(-1, out_channels)
    parallel.matmul(rows, w.reshape(out_channels, channels).T, y_rows)
    finish.channels_last(y_rows)
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


def _depthwise(x, w, begin, end, strides, dilations, out_shape, finish, allocate):
    """Y[n, c*mult + m] = sum over taps of X[n, c, tap window] * W[c*mult + m, 0, tap]."""
    if x.ndim == 4 and w.shape[0] == x.shape[1]:
        return depthwise_channels_last(
            x, w, finish.bias, finish.activation, begin, end, strides, dilations, out_shape, allocate
        )
    return depthwise_taps(x, w, begin, end, strides, dilations, out_shape, allocate, finish)
