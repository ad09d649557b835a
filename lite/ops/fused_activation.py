"""The numpy engine's fused activations (the vocabulary: :mod:`lite.format.fused_activation`).

The engine applies the activation a layer carries to the layer's first output right after the
kernel runs, or hands it to a kernel that takes a keyword-only ``fused_activation`` parameter
(Conv, Gemm), which applies it bit for bit as :func:`apply` would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lite.format.fused_activation import ATTRIBUTE, NAMES, PARAMS_ATTRIBUTE, check

__all__ = ["ATTRIBUTE", "NAMES", "PARAMS_ATTRIBUTE", "apply", "apply_into", "check"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a negative magnitude never overflows; both branches are then exact.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


# Each takes (x, params, out): Relu and Clip write into ``out`` when it is given, the others
# return a new array (apply_into copies it over).
def _relu(x, params, out):
    return np.maximum(x, 0, out=out)


def _clip(x, params, out):
    low, high = params
    return np.clip(x, low, high, out=out)


def _leaky_relu(x, params, out):
    (alpha,) = params
    return np.where(x >= 0, x, x * x.dtype.type(alpha))


def _hard_sigmoid(x, params, out):
    alpha, beta = params
    return np.clip(x * x.dtype.type(alpha) + x.dtype.type(beta), 0, 1)


def _hard_swish(x, params, out):
    return x * np.clip(x / x.dtype.type(6) + x.dtype.type(0.5), 0, 1)


def _silu(x, params, out):
    return x * _sigmoid(x)


# name -> its implementation; exactly the names of lite.format.fused_activation.
_ACTIVATIONS: dict[str, Callable] = {
    "Relu": _relu,
    "Clip": _clip,
    "LeakyRelu": _leaky_relu,
    "Sigmoid": lambda x, p, out: _sigmoid(x),
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Silu": _silu,
    "Tanh": lambda x, p, out: np.tanh(x),
}


def apply(x: np.ndarray, name: str, params: Sequence[float]) -> np.ndarray:
    """Apply the fused activation ``name`` to ``x`` (in place when ``x`` is writable)."""
    return _ACTIVATIONS[name](x, tuple(params), x if x.flags.writeable else None)


def apply_into(x: np.ndarray, out: np.ndarray, name: str, params: Sequence[float]) -> None:
    """Write the activation of ``x`` into ``out`` (same shape; ``out`` may be ``x``): the values
    :func:`apply` gives, bit for bit, in one pass for Relu and Clip."""
    result = _ACTIVATIONS[name](x, tuple(params), out)
    if result is not out:
        np.copyto(out, result)
