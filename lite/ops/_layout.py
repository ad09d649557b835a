"""Channels-last activations: arrays of the logical ONNX shape ``(N, C, *spatial)`` whose memory is
laid out ``(N, *spatial, C)``.

numpy arrays carry their strides, so a kernel may hand on such a view and every other kernel
still sees an ordinary ``(N, C, H, W)`` array (numpy semantics do not depend on the layout). Three
kernels use this to keep the chain of a MobileNet-style block free of transposes:

- the depthwise convolution computes channels-last (a tap is then one multiply-add along rows
  of ``W * C`` contiguous elements) and returns its output channels-last;
- a pointwise (1x1) convolution is a GEMM either way round (``W @ X`` or ``X @ W^T``) and writes
  its output in the layout its input came in;
- Add/Sub/Mul/Div write their output in the layout their operands share.

Everything else treats a channels-last input like any other strided array. The numpy engine
hands C-contiguous arrays back to its caller.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def channels_last_order(ndim: int) -> tuple[int, ...]:
    """The axes ``(0, 2, ..., ndim - 1, 1)``: NCHW -> NHWC."""
    return (0, *range(2, ndim), 1)


def channels_first_order(ndim: int) -> tuple[int, ...]:
    """The axes ``(0, ndim - 1, 1, ..., ndim - 2)``: NHWC -> NCHW."""
    return (0, ndim - 1, *range(1, ndim - 1))


def is_channels_last(x: np.ndarray) -> bool:
    """True when ``x`` (N, C, *spatial) is laid out contiguously as (N, *spatial, C) and not also
    C-contiguous (shapes where both hold, such as ``(N, C, 1, 1)``, count as channels-first)."""
    return (
        isinstance(x, np.ndarray)
        and x.ndim >= 3
        and not x.flags.c_contiguous
        and x.transpose(channels_last_order(x.ndim)).flags.c_contiguous
    )


def empty_channels_last(shape: tuple[int, ...], dtype, allocate: Callable = np.empty) -> np.ndarray:
    """An uninitialised array of logical shape ``(N, C, *spatial)`` laid out channels-last,
    its memory from ``allocate``."""
    ndim = len(shape)
    storage = allocate(tuple(shape[i] for i in channels_last_order(ndim)), dtype)
    return storage.transpose(channels_first_order(ndim))
