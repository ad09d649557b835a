"""Max and average pooling over NCHW, one vectorized pass per kernel tap."""

from __future__ import annotations

import numpy as np

from train import _trace
from train.autograd import make_result
from train.errors import ShapeError
from train.ops.conv import Pads, output_size, pad_input, tap
from train.tensor import Tensor


def _geometry(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads) -> tuple[int, int]:
    top, bottom, left, right = pads
    oh = output_size(x.shape[2], kernel[0], stride[0], 1, top + bottom)
    ow = output_size(x.shape[3], kernel[1], stride[1], 1, left + right)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"pooling: input {x.shape} is smaller than the kernel {kernel}")
    return oh, ow


def max_pool2d(
    x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads = (0, 0, 0, 0)
) -> Tensor:
    """``ops.MaxPool``; padded cells never win (they hold -inf). Ties go to the first tap."""
    oh, ow = _geometry(x, kernel, stride, pads)
    xp = pad_input(x.data, pads, value=-np.inf)
    taps = [
        (tap(i, 1, stride[0], oh), tap(j, 1, stride[1], ow))
        for i in range(kernel[0])
        for j in range(kernel[1])
    ]
    result = xp[:, :, taps[0][0], taps[0][1]].copy()
    for rows, cols in taps[1:]:
        np.maximum(result, xp[:, :, rows, cols], out=result)

    def backward(grad: np.ndarray) -> tuple:
        d_xp = np.zeros(xp.shape, dtype=grad.dtype)
        taken = np.zeros(result.shape, dtype=bool)
        for rows, cols in taps:
            hit = xp[:, :, rows, cols] == result
            hit &= ~taken  # ties: the first tap wins, as in ONNX/PyTorch
            taken |= hit
            d_xp[:, :, rows, cols] += grad * hit
        top, bottom, left, right = pads
        return (d_xp[:, :, top : xp.shape[2] - bottom, left : xp.shape[3] - right],)

    out = make_result(result, (x,), backward)
    _trace.record(
        "MaxPool",
        [x],
        out,
        kernel_shape=list(kernel),
        strides=list(stride),
        pads=[pads[0], pads[2], pads[1], pads[3]],
    )
    return out


def avg_pool2d(
    x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pads: Pads = (0, 0, 0, 0)
) -> Tensor:
    """``ops.AvgPool``; the divisor counts only real (unpadded) cells, as ONNX's default."""
    oh, ow = _geometry(x, kernel, stride, pads)
    xp = pad_input(x.data, pads)
    taps = [
        (tap(i, 1, stride[0], oh), tap(j, 1, stride[1], ow))
        for i in range(kernel[0])
        for j in range(kernel[1])
    ]
    total = np.zeros((x.shape[0], x.shape[1], oh, ow), dtype=x.dtype)
    for rows, cols in taps:
        total += xp[:, :, rows, cols]
    if any(pads):
        real = pad_input(np.ones((1, 1, *x.shape[2:]), dtype=x.dtype), pads)
        count = sum(real[:, :, rows, cols] for rows, cols in taps)
    else:
        count = np.asarray(kernel[0] * kernel[1], dtype=x.dtype)

    def backward(grad: np.ndarray) -> tuple:
        share = grad / count
        d_xp = np.zeros(xp.shape, dtype=grad.dtype)
        for rows, cols in taps:
            d_xp[:, :, rows, cols] += share
        top, bottom, left, right = pads
        return (d_xp[:, :, top : xp.shape[2] - bottom, left : xp.shape[3] - right],)

    out = make_result(total / count, (x,), backward)
    _trace.record(
        "AveragePool",
        [x],
        out,
        kernel_shape=list(kernel),
        strides=list(stride),
        pads=[pads[0], pads[2], pads[1], pads[3]],
    )
    return out


def global_avg_pool2d(x: Tensor) -> Tensor:
    """Mean over H and W keeping them as size 1: (N, C, H, W) -> (N, C, 1, 1)."""
    count = x.shape[2] * x.shape[3]

    def backward(grad: np.ndarray) -> tuple:
        return (np.broadcast_to(grad / count, x.shape),)

    out = make_result(x.data.mean(axis=(2, 3), keepdims=True), (x,), backward)
    _trace.record("GlobalAveragePool", [x], out)
    return out
