"""Conv: N-d convolution with groups, dilations, strides and padding.

https://onnx.ai/onnx/operators/onnx__Conv.html

Three paths, picked by shape, all computing the same thing:

- pointwise (every kernel extent 1): the input *is* the im2col matrix, so one GEMM
  ``W (M, C) @ X (C, H*W)`` with no copy beyond an optional stride subsample;
- depthwise (group == input channels): each output is a sum of ``prod(kernel)`` shifted
  multiply-adds, each over one long contiguous slice (see ``TapPlan``), in cache-sized channel
  blocks; a GEMM per channel would be all call overhead;
- general: im2col as a strided view of the padded input laid out ``(C, *kernel, *out)``, made
  contiguous once (into a reused per-thread buffer), then one batched GEMM ``(group, M/g, C/g*K) @ (group, C/g*K, P)``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._conv_common import (
    TapPlan,
    fill_phase,
    compute_dtype,
    output_shape,
    pad_input,
    resolve_pads,
    scratch,
    spatial_defaults,
    windows,
)
from lite.ops.registry import kernel

# Elements per block in the depthwise path: the accumulator and scratch buffers stay in L2.
_DEPTHWISE_BLOCK_ELEMENTS = 96 * 1024
# From this many channels on, the channels-last einsum path is faster than per-tap ufuncs.
_CHANNELS_LAST_MIN_CHANNELS = 192


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
    if group == channels and group > 1:
        y = _depthwise(x, w, begin, end, strides, dilations, out_shape)
    elif all(k == 1 for k in kernel_dims):
        y = _pointwise(pad_input(x, begin, end), w, group, strides, out_shape)
    else:
        y = _im2col(pad_input(x, begin, end), w, group, kernel_dims, strides, dilations, out_shape)
    y = y.reshape(batch, out_channels, *out_shape)
    if B is not None:
        y += np.asarray(B, dtype=dtype).reshape((out_channels,) + (1,) * len(out_shape))
    return y.astype(X.dtype, copy=False)


def _pointwise(padded, w, group, strides, out_shape):
    batch, channels = padded.shape[:2]
    if any(s != 1 for s in strides):
        padded = padded[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    pixels = int(np.prod(out_shape))
    weights = w.reshape(group, w.shape[0] // group, channels // group)
    if group == 1 and batch == 1:
        return np.matmul(weights[0], padded.reshape(channels, pixels))
    cols = padded.reshape(batch, group, channels // group, pixels)
    return np.matmul(weights, cols)


def _im2col(padded, w, group, kernel_dims, strides, dilations, out_shape):
    batch, channels = padded.shape[:2]
    taps = int(np.prod(kernel_dims))
    pixels = int(np.prod(out_shape))
    view = windows(padded, kernel_dims, strides, dilations, out_shape)
    cols = scratch(view.shape, padded.dtype)
    np.copyto(cols, view)
    cols = cols.reshape(batch, group, channels // group * taps, pixels)
    weights = w.reshape(group, w.shape[0] // group, channels // group * taps)
    if group == 1 and batch == 1:
        return np.matmul(weights[0], cols[0, 0])
    return np.matmul(weights, cols)


def _depthwise(x, w, begin, end, strides, dilations, out_shape):
    """Y[n, c*mult + m] = sum over taps of X[n, c, tap window] * W[c*mult + m, 0, tap]."""
    channels = x.shape[1]
    if (
        channels >= _CHANNELS_LAST_MIN_CHANNELS
        and w.shape[0] == channels
        and len(out_shape) == 2
        and all(d == 1 for d in dilations)
    ):
        return _depthwise_channels_last(x, w, begin, end, strides, out_shape)
    return _depthwise_taps(x, w, begin, end, strides, dilations, out_shape)


def _depthwise_channels_last(x, w, begin, end, strides, out_shape):
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
    y = np.empty((batch, channels, out_h, out_w), dtype=x.dtype)
    for n in range(batch):
        total = None
        for r_h in range(min(stride_h, kernel_h)):
            for r_w in range(min(stride_w, kernel_w)):
                rows = range(r_h, kernel_h, stride_h)
                cols = range(r_w, kernel_w, stride_w)
                extra = (len(rows) - 1) * grid_w + len(cols)
                buffer = np.zeros((grid_h * grid_w + extra, channels), dtype=x.dtype)
                grid_view = buffer[: grid_h * grid_w].reshape(1, grid_h, grid_w, channels).transpose(0, 3, 1, 2)
                fill_phase(grid_view, x[n : n + 1], (r_h, r_w), begin, strides)
                view = np.lib.stride_tricks.as_strided(
                    buffer,
                    (len(rows), len(cols), length, channels),
                    (grid_w * channels * itemsize, channels * itemsize, channels * itemsize, itemsize),
                    writeable=False,
                )
                taps = np.ascontiguousarray(w[:, 0][:, rows][:, :, cols].transpose(1, 2, 0))
                part = np.einsum("ijpc,ijc->pc", view, taps)
                total = part if total is None else np.add(total, part, out=total)
        y[n] = total.reshape(out_h, grid_w, channels)[:, :out_w].transpose(2, 0, 1)
    return y


def _depthwise_taps(x, w, begin, end, strides, dilations, out_shape):
    batch, channels = x.shape[:2]
    multiplier = w.shape[0] // channels
    plan = TapPlan(x, begin, end, w.shape[2:], strides, dilations, out_shape, 0)
    # (taps, C, multiplier, 1): one broadcastable weight column per tap.
    weights = np.ascontiguousarray(w.reshape(channels, multiplier, -1).transpose(2, 0, 1))[..., None]
    length = plan.length
    block = max(1, _DEPTHWISE_BLOCK_ELEMENTS // (length * multiplier))
    y = np.empty((batch, channels, multiplier, length), dtype=x.dtype)
    spare = np.empty((min(block, channels), multiplier, length), dtype=x.dtype)
    for start in range(0, channels, block):
        stop = min(start + block, channels)
        tmp = spare[: stop - start]
        for n in range(batch):
            acc = y[n, start:stop]
            for index, region in enumerate(plan.regions(slice(start, stop))):
                source = region[n, :, None, :]
                if index == 0:
                    np.multiply(source, weights[index, start:stop], out=acc)
                else:
                    np.multiply(source, weights[index, start:stop], out=tmp)
                    acc += tmp
    return np.ascontiguousarray(plan.crop(y.reshape(batch, channels * multiplier, length)))
