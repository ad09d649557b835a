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
from lite.ops._layout import is_channels_last
from lite.plan_cache import PlanCache


class SqueezeExcite:
    """``y = x * act2(W2 @ act1(W1 @ mean(x) + b1) + b2)``; ``W1`` (C', C), ``W2`` (C, C')."""

    def __init__(self, w1: np.ndarray, b1: np.ndarray | None, act1: tuple[str, Sequence[float]] | None,
                 w2: np.ndarray, b2: np.ndarray | None, act2: tuple[str, Sequence[float]] | None,
                 fallback: Callable[[np.ndarray, Callable], np.ndarray]) -> None:
        self.dtype = w1.dtype
        if w1.dtype == np.float16:
            # The gate in float32 and the product with x rounded once, as ONNX Runtime does on
            # CPUs: in float16 the means' 1/(H*W) alone was off by up to half a float16 step.
            w1, b1, w2, b2 = (None if value is None else value.astype(np.float32) for value in (w1, b1, w2, b2))
        self.w1_t = np.ascontiguousarray(w1.T)  # (C, C'): rows of means times it
        self.w2_t = np.ascontiguousarray(w2.T)
        if act2 is not None and act2[0] == "HardSigmoid" and w2.dtype.kind == "f":
            # clip(alpha * (h @ W2^T + b2) + beta, 0, 1) with alpha and beta in the second
            # layer: clip(h @ (alpha W2^T) + (alpha b2 + beta), 0, 1), two passes fewer.
            alpha, beta = (w2.dtype.type(value) for value in act2[1])
            self.w2_t = self.w2_t * alpha
            b2 = np.full(w2.shape[0], beta, w2.dtype) if b2 is None else (b2 * alpha + beta).astype(w2.dtype)
            act2 = ("Clip", (0.0, 1.0))
        # SiLU and Sigmoid of a float type from halved weights and bias (exact): x * sigmoid(x)
        # = h * (1 + tanh(h)) and sigmoid(x) = (1 + tanh(h)) / 2 with h = x / 2, three numpy
        # calls where the activations took four and five (the gate's vectors are a few dozen
        # values: its time is the calls).
        self.act1 = self.act2 = None
        if act1 is not None and act1[0] == "Silu" and w1.dtype.kind == "f":
            self.w1_t, b1 = _halved(self.w1_t, b1)
            self.act1 = _silu_of_half(w1.dtype)
        elif act1 is not None:
            self.act1 = activations.in_place(*act1, w1.dtype)
        if act2 is not None and act2[0] == "Sigmoid" and w2.dtype.kind == "f":
            self.w2_t, b2 = _halved(self.w2_t, b2)
            self.act2 = _sigmoid_of_half(w2.dtype)
        elif act2 is not None:
            self.act2 = activations.in_place(*act2, w2.dtype)
        self.b1 = b1
        self.b2 = b2
        self.fallback = fallback
        self._layouts: PlanCache[_Layout] = PlanCache()  # per input shape, strides and type

    def gate(self, means: np.ndarray) -> np.ndarray:
        """The per-channel gate of rows of channel means (N, C): the two layers and their activations."""
        hidden = np.matmul(means, self.w1_t)
        if self.b1 is not None:
            np.add(hidden, self.b1, out=hidden)
        if self.act1 is not None:
            self.act1(hidden)
        gate = np.matmul(hidden, self.w2_t)
        if self.b2 is not None:
            np.add(gate, self.b2, out=gate)
        if self.act2 is not None:
            self.act2(gate)
        return gate

    def __call__(self, x: np.ndarray, *, allocate: Callable = np.empty) -> np.ndarray:
        key = (x.shape, x.strides, x.dtype)
        layout = self._layouts.get(key)
        if layout is None:
            if x.ndim != 4 or x.dtype != self.dtype or x.shape[1] != self.w1_t.shape[0] or not x.size:
                return self.fallback(x, allocate)
            layout = self._layouts.put(key, _Layout(x))
        weights = _mean_weights(layout.pixels, self.w1_t.dtype)
        matmul = np.matmul
        if layout.channels_last:
            means = matmul(weights, x.transpose(0, 2, 3, 1).reshape(layout.rows_shape))  # (N, C)
        else:
            means = matmul(x.reshape(layout.rows_shape), weights)
        y = allocate(layout.storage_shape, x.dtype)
        gate = self.gate(means)
        if layout.channels_last:
            # (N, H, W, C) storage times the gate broadcast over its rows, seen as (N, C, H, W).
            return np.multiply(x, gate.reshape(layout.gate_shape), out=y.transpose(0, 3, 1, 2))
        return np.multiply(x, gate.reshape(layout.gate_shape), out=y)


def _halved(w_t: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """A layer's weights and bias times 1/2: its output is then h = x / 2, exactly."""
    half = w_t.dtype.type(0.5)
    return w_t * half, None if b is None else (b * half).astype(w_t.dtype)


def _silu_of_half(dtype: np.dtype) -> Callable[[np.ndarray], None]:
    """``f(h)``: ``h`` (x / 2) becomes x * sigmoid(x) = h * (1 + tanh(h))."""
    (one,) = _typed(dtype, 1)

    def activate(h: np.ndarray) -> None:
        t = np.tanh(h)
        np.add(t, one, out=t)
        np.multiply(h, t, out=h)

    return activate


def _sigmoid_of_half(dtype: np.dtype) -> Callable[[np.ndarray], None]:
    """``f(h)``: ``h`` (x / 2) becomes sigmoid(x) = tanh(h) / 2 + 1/2."""
    (half,) = _typed(dtype, 0.5)

    def activate(h: np.ndarray) -> None:
        np.tanh(h, out=h)
        np.multiply(h, half, out=h)
        np.add(h, half, out=h)

    return activate


def _typed(dtype: np.dtype, *values: float) -> tuple[np.ndarray, ...]:
    """``values`` as read-only 0-d arrays of ``dtype``: a ufunc converts a numpy scalar operand
    into one on every call (about 0.6 µs)."""
    constants = tuple(np.array(dtype.type(value)) for value in values)
    for constant in constants:
        constant.flags.writeable = False
    return constants


class _Layout:
    """What a call decides from the input's shape and layout, kept per shape, strides and type
    (tensors of a few hundred values: working it out on every call was a third of the block)."""

    def __init__(self, x: np.ndarray):
        batch, channels, height, width = x.shape
        self.pixels = height * width
        self.channels_last = is_channels_last(x)
        if self.channels_last:
            self.rows_shape = (batch, self.pixels, channels)
            self.storage_shape = (batch, height, width, channels)
        else:
            self.rows_shape = (batch, channels, self.pixels)
            self.storage_shape = x.shape
        self.gate_shape = (batch, channels, 1, 1)


@functools.lru_cache(maxsize=64)
def _mean_weights(pixels: int, dtype: np.dtype) -> np.ndarray:
    weights = np.full(pixels, 1.0 / pixels, dtype)
    weights.flags.writeable = False
    return weights
