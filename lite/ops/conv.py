"""Conv: N-d convolution with groups, dilations, strides and padding.

https://onnx.ai/onnx/operators/onnx__Conv.html

Three paths, picked by shape, all computing the same thing:

- pointwise (every kernel extent 1): the input *is* the im2col matrix, so one GEMM
  ``W (M, C) @ X (C, H*W)`` with no copy beyond an optional stride subsample;
- depthwise (group == input channels): each output is a sum of ``prod(kernel)`` shifted
  multiply-adds, done in cache-sized channel blocks; a GEMM per channel would be all overhead;
- general: im2col as a strided view of the padded input laid out ``(C, *kernel, *out)``, made
  contiguous once, then one batched GEMM ``(group, M/g, C/g*K) @ (group, C/g*K, P)``.
"""

from __future__ import annotations

import itertools

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._conv_common import (
    compute_dtype,
    kernel_slice,
    output_shape,
    pad_input,
    resolve_pads,
    spatial_defaults,
    windows,
)
from lite.ops.registry import kernel

# Elements per block in the depthwise path: two float32 buffers of this size stay in L2.
_DEPTHWISE_BLOCK_ELEMENTS = 32 * 1024


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
    padded = pad_input(x, begin, end)

    if group == channels and group > 1:
        y = _depthwise(padded, w, strides, dilations, out_shape)
    elif all(k == 1 for k in kernel_dims):
        y = _pointwise(padded, w, group, strides, out_shape)
    else:
        y = _im2col(padded, w, group, kernel_dims, strides, dilations, out_shape)
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
    cols = np.ascontiguousarray(view).reshape(batch, group, channels // group * taps, pixels)
    weights = w.reshape(group, w.shape[0] // group, channels // group * taps)
    if group == 1 and batch == 1:
        return np.matmul(weights[0], cols[0, 0])
    return np.matmul(weights, cols)


def _depthwise(padded, w, strides, dilations, out_shape):
    """Y[n, c, m] = sum over taps of X[n, c, tap window] * W[c * mult + m, 0, tap]."""
    batch, channels = padded.shape[:2]
    multiplier = w.shape[0] // channels
    kernel_dims = w.shape[2:]
    rank = len(out_shape)
    # (taps, C, multiplier, 1, ..., 1): one broadcastable weight per tap.
    taps = w.reshape(channels, multiplier, -1).transpose(2, 0, 1)
    taps = np.ascontiguousarray(taps).reshape(taps.shape + (1,) * rank)
    offsets = list(itertools.product(*(range(k) for k in kernel_dims)))
    slices = [kernel_slice(o, strides, dilations, out_shape) for o in offsets]
    pixels = max(int(np.prod(out_shape)), 1)
    block = max(1, _DEPTHWISE_BLOCK_ELEMENTS // (pixels * multiplier))
    y = np.empty((batch, channels, multiplier, *out_shape), dtype=padded.dtype)
    scratch = np.empty((min(block, channels), multiplier, *out_shape), dtype=padded.dtype)
    for n in range(batch):
        for start in range(0, channels, block):
            stop = min(start + block, channels)
            acc = y[n, start:stop]
            tmp = scratch[: stop - start]
            source = padded[n, start:stop, None]
            for index, (tap_slice, tap_weight) in enumerate(zip(slices, taps)):
                region = source[(slice(None), slice(None)) + tap_slice]
                if index == 0:
                    np.multiply(region, tap_weight[start:stop], out=acc)
                else:
                    np.multiply(region, tap_weight[start:stop], out=tmp)
                    acc += tmp
    return y
