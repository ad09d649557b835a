"""Squeeze-and-excitation (Hu et al. 2018) as one step of the numpy engine.

The block gates each channel of ``x`` (N, C, H, W) by a two-layer function of the channel means::

    s = mean over (H, W) of x                   ReduceMean(axes=[2, 3], keepdims=1)
    h = act1(W1 @ s + b1)                       Conv 1x1, C -> C', fused activation
    g = act2(W2 @ h + b2)                       Conv 1x1, C' -> C, Sigmoid-like
    y = x * g                                   Mul, g broadcast over (H, W)

Run node by node that is six kernel calls over tensors of C values (RegNet, EfficientNet,
PP-LCNet and MobileNetV3 have one per block): most of their time is the kernels' entry and
argument handling. Here it is a product of x with 1/(H*W) for the means, two small GEMMs and a
broadcast multiply that keeps x's layout (lite.ops._layout). The engine's rewrite
(lite.engines.numpy_engine) builds one per matching block and keeps the original steps: inputs
that are not 4-D float images of the weights' type run through them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from lite.ops import fused_activation as activations
from lite.ops._layout import channels_last_order, empty_channels_last, is_channels_last


class SqueezeExcite:
    """``y = x * act2(W2 @ act1(W1 @ mean(x) + b1) + b2)``; ``W1`` (C', C), ``W2`` (C, C')."""

    def __init__(self, w1: np.ndarray, b1: np.ndarray | None, act1: tuple[str, Sequence[float]] | None,
                 w2: np.ndarray, b2: np.ndarray | None, act2: tuple[str, Sequence[float]] | None,
                 fallback: Callable[[np.ndarray, Callable], np.ndarray]) -> None:
        self.w1_t = np.ascontiguousarray(w1.T)  # (C, C'): rows of means times it
        self.w2_t = np.ascontiguousarray(w2.T)
        if act2 is not None and act2[0] == "HardSigmoid" and w2.dtype.kind == "f":
            # clip(alpha * (h @ W2^T + b2) + beta, 0, 1) with alpha and beta in the second
            # layer: clip(h @ (alpha W2^T) + (alpha b2 + beta), 0, 1), two passes fewer.
            alpha, beta = (w2.dtype.type(value) for value in act2[1])
            self.w2_t = self.w2_t * alpha
            b2 = np.full(w2.shape[0], beta, w2.dtype) if b2 is None else (b2 * alpha + beta).astype(w2.dtype)
            act2 = ("Clip", (0.0, 1.0))
        self.b1 = b1
        self.b2 = b2
        self.act1 = None if act1 is None else activations.in_place(*act1, w1.dtype)
        self.act2 = None if act2 is None else activations.in_place(*act2, w2.dtype)
        self.fallback = fallback
        self.dtype = w1.dtype

    def __call__(self, x: np.ndarray, *, allocate: Callable = np.empty) -> np.ndarray:
        if x.ndim != 4 or x.dtype != self.dtype or x.shape[1] != self.w1_t.shape[0] or not x.size:
            return self.fallback(x, allocate)
        batch, channels = x.shape[:2]
        pixels = x.shape[2] * x.shape[3]
        weights = _mean_weights(pixels, x.dtype)
        if is_channels_last(x):
            rows = x.transpose(channels_last_order(4)).reshape(batch, pixels, channels)
            means = np.matmul(weights, rows)  # (N, C)
            y = empty_channels_last(x.shape, x.dtype, allocate)
        else:
            means = np.matmul(x.reshape(batch, channels, pixels), weights)
            y = allocate(x.shape, x.dtype)
        hidden = np.matmul(means, self.w1_t)
        if self.b1 is not None:
            hidden += self.b1
        if self.act1 is not None:
            self.act1(hidden)
        gate = np.matmul(hidden, self.w2_t)
        if self.b2 is not None:
            gate += self.b2
        if self.act2 is not None:
            self.act2(gate)
        return np.multiply(x, gate.reshape(batch, channels, 1, 1), out=y)


@functools.lru_cache(maxsize=64)
def _mean_weights(pixels: int, dtype: np.dtype) -> np.ndarray:
    weights = np.full(pixels, 1.0 / pixels, dtype)
    weights.flags.writeable = False
    return weights
