"""Activations fused into a preceding Conv/ConvTranspose/Gemm/MatMul by the converter.

The converter stores them on the producing node as two attributes, Lite-style:
``fused_activation`` (STRING, one of the names below) and ``fused_activation_params`` (FLOATS).
The engine applies the activation to the node's first output right after the kernel runs.

| name        | params         | formula                                   |
|-------------|----------------|-------------------------------------------|
| Relu        | —              | max(x, 0)                                 |
| Clip        | min, max       | min(max(x, min), max)   (Relu6: 0, 6)     |
| LeakyRelu   | alpha          | x if x >= 0 else alpha * x                |
| Sigmoid     | —              | 1 / (1 + exp(-x))                         |
| HardSigmoid | alpha, beta    | clip(alpha * x + beta, 0, 1)              |
| HardSwish   | —              | x * clip(x / 6 + 1 / 2, 0, 1)             |
| Silu        | —              | x * sigmoid(x)                            |
| Tanh        | —              | tanh(x)                                   |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

ATTRIBUTE = "fused_activation"
PARAMS_ATTRIBUTE = "fused_activation_params"


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


_ACTIVATIONS: dict[str, tuple[int, Callable]] = {
    "Relu": (0, _relu),
    "Clip": (2, _clip),
    "LeakyRelu": (1, _leaky_relu),
    "Sigmoid": (0, lambda x, p, out: _sigmoid(x)),
    "HardSigmoid": (2, _hard_sigmoid),
    "HardSwish": (0, _hard_swish),
    "Silu": (0, _silu),
    "Tanh": (0, lambda x, p, out: np.tanh(x)),
}

NAMES = frozenset(_ACTIVATIONS)


def check(name: str, params: Sequence[float]) -> str | None:
    """None if ``name``/``params`` form a valid fused activation, else the reason."""
    if name not in _ACTIVATIONS:
        return f"unknown fused activation {name!r} (known: {', '.join(sorted(_ACTIVATIONS))})"
    arity = _ACTIVATIONS[name][0]
    if len(params) != arity:
        return f"fused activation {name} takes {arity} parameters, got {len(params)}"
    return None


def apply(x: np.ndarray, name: str, params: Sequence[float]) -> np.ndarray:
    """Apply the fused activation ``name`` to ``x`` (in place when ``x`` is writable)."""
    return _ACTIVATIONS[name][1](x, tuple(params), x if x.flags.writeable else None)


def apply_into(x: np.ndarray, out: np.ndarray, name: str, params: Sequence[float]) -> None:
    """Write the activation of ``x`` into ``out`` (same shape; ``out`` may be ``x``): the values
    :func:`apply` gives, bit for bit, in one pass for Relu and Clip."""
    result = _ACTIVATIONS[name][1](x, tuple(params), out)
    if result is not out:
        np.copyto(out, result)
