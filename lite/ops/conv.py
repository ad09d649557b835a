"""Conv: N-d convolution with groups, dilations, strides and padding.

https://onnx.ai/onnx/operators/onnx__Conv.html

Three paths, picked by shape, all computing the same thing:

- pointwise (every kernel extent 1): the input *is* the im2col matrix, so one GEMM
  ``W (M, C) @ X (C, H*W)`` per block of pixels, with no copy beyond an optional stride subsample;
- depthwise (group == input channels): each output is a sum of ``prod(kernel)`` shifted
  multiply-adds, each over one long contiguous slice (see ``TapPlan``), in cache-sized channel
  blocks; a GEMM per channel would be all call overhead;
- general: im2col as a strided view of the padded input laid out ``(C, *kernel, *out)``, copied
  a block of output rows at a time into a buffer of at most ``_COLUMNS_BYTES``, then one GEMM
  ``W (M/g, C/g*K) @ cols (C/g*K, rows*W)`` per block that writes straight into the NCHW output.

Bias and the node's fused activation (keyword-only ``fused_activation``, see
:mod:`lite.ops.registry`) are applied to each block of the output right after its GEMM, while it
is still in cache, instead of in separate passes over the whole tensor.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops import fused_activation as activations
from lite.ops._conv_common import (
    TapPlan,
    compute_dtype,
    fill_phase,
    output_shape,
    pad_input,
    resolve_pads,
    spatial_defaults,
    windows,
)
from lite.ops.registry import kernel

# Scratch of the depthwise path, in elements: a block of channels holds one buffer per stride
# phase plus an accumulator and a spare, so stride 1 gets blocks of 96 K elements (they stay in
# L2) and stride 2 (four phases) half that, keeping the scratch near 1.1 MiB either way.
_DEPTHWISE_SCRATCH_ELEMENTS = 3 * 96 * 1024
# From this many channels on, the channels-last einsum path is faster than per-tap ufuncs.
_CHANNELS_LAST_MIN_CHANNELS = 192
# im2col columns per GEMM: at most this many bytes (the scratch stays bounded on big images),
# but at least _MIN_GEMM_COLUMNS output pixels, below which the GEMM slows down markedly; a
# layer whose whole im2col matrix fits runs as one GEMM.
_COLUMNS_BYTES = 1 << 20
_MIN_GEMM_COLUMNS = 512
# Output bytes per GEMM of the pointwise path, so bias and activation find the block in cache.
_POINTWISE_OUTPUT_BYTES = 1 << 19


@kernel("Conv", since=1)
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
    if group == channels and group > 1:
        y = _depthwise(x, w, begin, end, strides, dilations, out_shape, finish, allocate)
    elif all(k == 1 for k in kernel_dims):
        y = _pointwise(x, w, group, begin, end, strides, out_shape, finish, allocate)
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
            result = activations.apply(block, *self.activation)
            if result is not block:
                np.copyto(block, result)


def _pointwise(x, w, group, begin, end, strides, out_shape, finish, allocate):
    if any(begin) or any(end):
        x = pad_input(x, begin, end, allocate=allocate)
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    pixels = math.prod(out_shape)
    if any(s != 1 for s in strides):
        sampled = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
        x = allocate(sampled.shape, x.dtype)
        np.copyto(x, sampled)
    cols = x.reshape(batch, channels, pixels)
    per_group, out_per_group = channels // group, out_channels // group
    weights = w.reshape(group, out_per_group, per_group)
    y = allocate((batch, out_channels, pixels), x.dtype)
    step = max(256, _POINTWISE_OUTPUT_BYTES // max(1, out_per_group * x.dtype.itemsize))
    for n in range(batch):
        for g in range(group):
            channels_in = slice(g * per_group, (g + 1) * per_group)
            first, stop = g * out_per_group, (g + 1) * out_per_group
            for start in range(0, pixels, step):
                block = y[n, first:stop, start : start + step]
                np.matmul(weights[g], cols[n, channels_in, start : start + step], out=block)
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
                np.matmul(weights[g], cols.reshape(depth, -1), out=block)
                finish(block, first, stop)
    return y


def _depthwise(x, w, begin, end, strides, dilations, out_shape, finish, allocate):
    """Y[n, c*mult + m] = sum over taps of X[n, c, tap window] * W[c*mult + m, 0, tap]."""
    channels = x.shape[1]
    if (
        channels >= _CHANNELS_LAST_MIN_CHANNELS
        and w.shape[0] == channels
        and len(out_shape) == 2
        and all(d == 1 for d in dilations)
    ):
        y = _depthwise_channels_last(x, w, begin, end, strides, out_shape, allocate)
        finish(y.reshape(y.shape[0], channels, -1), 0, channels)
        return y
    return _depthwise_taps(x, w, begin, end, strides, dilations, out_shape, allocate, finish)


def _depthwise_channels_last(x, w, begin, end, strides, out_shape, allocate):
    """Many channels, small images: one einsum per stride phase over a channels-last copy.

    Laid out (rows, cols, C), the taps of one stride phase form a single overlapping strided
    view ``(taps_h, taps_w, L, C)``, and einsum's fused multiply-add runs along C; this beats
    per-tap ufuncs (two passes each) once C is long.
    """
    batch, channels = x.shape[:2]
    kernel_h, kernel_w = w.shape[2:]
    stride_h, stride_w = strides
    out_h, out_w = out_shape
    padded = [n + b + e for n, b, e in zip(x.shape[2:], begin, end)]
    grid_h, grid_w = (max(-(-p // s), 1) for p, s in zip(padded, strides))
    length = out_h * grid_w
    itemsize = x.dtype.itemsize
    y = allocate((batch, channels, out_h, out_w), x.dtype)
    total = allocate((length, channels), x.dtype)
    part = allocate((length, channels), x.dtype) if min(stride_h, kernel_h) * min(stride_w, kernel_w) > 1 else None
    for n in range(batch):
        first = True
        for r_h in range(min(stride_h, kernel_h)):
            for r_w in range(min(stride_w, kernel_w)):
                rows = range(r_h, kernel_h, stride_h)
                cols = range(r_w, kernel_w, stride_w)
                extra = (len(rows) - 1) * grid_w + len(cols)
                buffer = allocate((grid_h * grid_w + extra, channels), x.dtype)
                buffer.fill(0)
                grid_view = buffer[: grid_h * grid_w].reshape(1, grid_h, grid_w, channels).transpose(0, 3, 1, 2)
                fill_phase(grid_view, x[n : n + 1], (r_h, r_w), begin, strides)
                view = np.lib.stride_tricks.as_strided(
                    buffer,
                    (len(rows), len(cols), length, channels),
                    (grid_w * channels * itemsize, channels * itemsize, channels * itemsize, itemsize),
                    writeable=False,
                )
                taps = np.ascontiguousarray(w[:, 0][:, rows][:, :, cols].transpose(1, 2, 0))
                if first:
                    np.einsum("ijpc,ijc->pc", view, taps, out=total)
                    first = False
                else:
                    np.einsum("ijpc,ijc->pc", view, taps, out=part)
                    total += part
                # The next phase's buffer may reuse this one's bytes only once nothing refers to it.
                del buffer, grid_view, view
        y[n] = total.reshape(out_h, grid_w, channels)[:, :out_w].transpose(2, 0, 1)
    return y


def _depthwise_taps(x, w, begin, end, strides, dilations, out_shape, allocate, finish=None):
    """Blocks of channels; in each, every tap is one contiguous slice (``TapPlan``) and costs a
    multiply and an add over the whole block. Each finished block is cropped into the output and
    gets its bias and activation while still in cache."""
    batch, channels = x.shape[:2]
    multiplier = w.shape[0] // channels
    taps = math.prod(w.shape[2:])
    y = allocate((batch, channels * multiplier, math.prod(out_shape)), x.dtype)
    # (taps, C, multiplier, 1): one broadcastable weight column per tap.
    weights = np.ascontiguousarray(w.reshape(channels, multiplier, taps).transpose(2, 0, 1))[..., None]
    # The grid length depends only on the geometry: one channel's plan sizes the blocks.
    length = TapPlan(x[:1, :1], begin, end, w.shape[2:], strides, dilations, out_shape, 0).length
    phases = math.prod(min(s, (k - 1) * d + 1) for s, k, d in zip(strides, w.shape[2:], dilations))
    block = max(1, min(channels, _DEPTHWISE_SCRATCH_ELEMENTS // ((phases + 2) * length * multiplier)))
    for start in range(0, channels, block):
        stop = min(start + block, channels)
        plan = TapPlan(x[:, start:stop], begin, end, w.shape[2:], strides, dilations, out_shape, 0, allocate)
        acc = allocate((stop - start, multiplier, plan.length), x.dtype)
        spare = allocate((stop - start, multiplier, plan.length), x.dtype)
        for n in range(batch):
            for index, region in enumerate(plan.regions()):
                source = region[n, :, None, :]
                if index == 0:
                    np.multiply(source, weights[index, start:stop], out=acc)
                else:
                    np.multiply(source, weights[index, start:stop], out=spare)
                    acc += spare
            target = y[n, start * multiplier : stop * multiplier]
            np.copyto(target.reshape((-1,) + tuple(out_shape)), plan.crop(acc.reshape(-1, plan.length)))
            if finish is not None:
                finish(target, start * multiplier, stop * multiplier)
        del plan, acc, spare
    return y
