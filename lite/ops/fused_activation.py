"""The numpy engine's fused activations (the vocabulary: :mod:`lite.format.fused_activation`).

The engine applies the activation a layer carries to the layer's first output right after the
kernel runs, or hands it to a kernel that takes a keyword-only ``fused_activation`` parameter
(Conv, Gemm), which applies it bit for bit as :func:`apply` would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from lite.format.fused_activation import ATTRIBUTE, NAMES, PARAMS_ATTRIBUTE, check
from lite.ops._helpers import clip

__all__ = ["ATTRIBUTE", "NAMES", "PARAMS_ATTRIBUTE", "apply", "apply_into", "check", "in_place", "into", "sigmoid",
           "silu_of_half"]

# |x| beyond which e^x overflows, per float type the fast sigmoid runs on.
_EXP_LIMITS = {np.dtype(np.float32): 88.0, np.dtype(np.float64): 709.0}
# Below these the sigmoid is 0, as 1 / (1 + e^-x) gives in PyTorch, where e^-x overflows to inf.
# The bounded e^-x alone would leave a floor of 6e-39 (float32), and a detector's
# "sigmoid(score) > 0" kept every candidate.
_ZERO_BELOW = {np.dtype(np.float32): -88.72284, np.dtype(np.float64): -709.782712893384}


def _one_plus_exp_negative(x: np.ndarray) -> np.ndarray:
    """``1 + e^-x`` as a new array, ``x`` first bounded to the exponential's finite range (the
    sigmoid of a bounded value differs from the exact one by under 1e-38 in float32)."""
    low, high, one = _constants(x.dtype, (-_EXP_LIMITS[x.dtype], _EXP_LIMITS[x.dtype], 1))
    t = clip(x, low, high)
    if type(t) is not np.ndarray:  # a rank-0 input: ufuncs return a scalar, not an array to write into
        t = np.array(t)
    np.negative(t, out=t)
    np.exp(t, out=t)
    return np.add(t, one, out=t)


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``1 / (1 + e^-x)`` in ``x``'s float type (into ``out`` when given): five passes over one
    temporary for float32 and float64, where the formula with ``where`` over both branches took
    five times as long on a 64x64 EfficientNet's activations; other types by that formula."""
    if x.dtype not in _EXP_LIMITS:
        e = np.exp(-np.abs(x))
        result = np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
        if out is None:
            return result
        np.copyto(out, result)
        return out
    t = _one_plus_exp_negative(x)
    result = np.reciprocal(t, out=t if out is None else out)
    zero_below = _ZERO_BELOW[x.dtype]
    if x.size and np.fmin.reduce(x, axis=None) < zero_below:  # one reduction (NaN skipped); the rare tail is 0
        np.putmask(result, x < zero_below, 0)
    return result


# Each takes (x, params, out): all but LeakyRelu and Tanh write into ``out`` when it is given,
# those return a new array (apply_into copies it over). Bounds go through numpy's
# clip ufunc (lite.ops._helpers.clip): np.maximum is slower on float32.
def _relu(x, params, out):
    if x.dtype.kind != "f":
        return np.maximum(x, 0, out=out)
    return clip(x, x.dtype.type(0), x.dtype.type(np.inf), out=out)


def _clip(x, params, out):
    low, high = params
    if x.dtype.kind != "f":
        return np.clip(x, low, high, out=out)
    return clip(x, x.dtype.type(low), x.dtype.type(high), out=out)


def _leaky_relu(x, params, out):
    (alpha,) = params
    return np.where(x >= 0, x, x * x.dtype.type(alpha))


def _hard_sigmoid(x, params, out):
    alpha, beta = params
    y = np.multiply(x, x.dtype.type(alpha), out=out)
    np.add(y, x.dtype.type(beta), out=y)
    return clip(y, x.dtype.type(0), x.dtype.type(1), out=y)


def _hard_swish(x, params, out):
    # x * clip(x * (1/6) + 1/2, 0, 1), ONNX's HardSigmoid(alpha=1/6) gate (a multiply: half a
    # division's time). The gate is built in ``out`` where that is contiguous and not ``x``'s
    # memory, else in a new array that then takes the result when there is no ``out``.
    sixth, half, zero, one = _constants(x.dtype, (1 / 6, 0.5, 0, 1))
    gate = _scratch_for(x, out)
    np.multiply(x, sixth, out=gate)
    np.add(gate, half, out=gate)
    clip(gate, zero, one, out=gate)
    return np.multiply(x, gate, out=gate if out is None else out)


@functools.lru_cache(maxsize=32)
def _constants(dtype: np.dtype, values: tuple) -> tuple:
    """``values`` typed as ``dtype``: read-only 0-d arrays for a float type (a ufunc converts a
    numpy scalar operand into one on every call, about 0.6 µs each), scalars otherwise."""
    if dtype.kind != "f":
        return tuple(dtype.type(value) for value in values)
    constants = tuple(np.array(dtype.type(value)) for value in values)
    for constant in constants:
        constant.flags.writeable = False
    return constants


def _silu(x, params, out):
    # x * sigmoid(x) = h * (1 + tanh(h)) with h = x / 2 (exact): four passes of which tanh is
    # the dearest, where 1 / (1 + e^-x) took five with an exp and a division (a 1024 x 48 map:
    # 70 -> 47 µs). Below about x = -17 the sum cancels to 0 (the exact value is under 1e-6).
    if x.dtype not in _EXP_LIMITS:
        return x * sigmoid(x)
    half, one = _constants(x.dtype, (0.5, 1))
    h = np.multiply(x, half)
    t = np.tanh(h, out=_scratch_for(x, out))
    np.add(t, one, out=t)
    return np.multiply(t, h, out=t if out is None else out)


def silu_of_half(h: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """SiLU of ``x`` given ``h = x / 2`` (float32 or float64), as :func:`apply` computes it
    (``h * (1 + tanh(h))``), into ``out``, ``scratch`` (``h``'s shape, not overlapping ``h``;
    it may be ``out``) holding the tanh: for kernels that halve their weights and bias, which
    is exact, and so save the halving pass."""
    (one,) = _constants(h.dtype, (1,))
    np.tanh(h, out=scratch)
    np.add(scratch, one, out=scratch)
    np.multiply(scratch, h, out=out)


def _scratch_for(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``out`` to build an intermediate in, where given, contiguous and not overlapping ``x``
    (a kernel's output buffer); else a new array of ``x``'s shape and type. (Passes over a
    strided ``out``, such as the interior of a zero-bordered buffer, were half as slow again
    as over a new array on 8x8 and 4x4 maps.)"""
    if out is None or not out.flags.c_contiguous or np.may_share_memory(x, out):
        return np.empty_like(x)
    return out


# name -> its implementation; exactly the names of lite.format.fused_activation.
_ACTIVATIONS: dict[str, Callable] = {
    "Relu": _relu,
    "Clip": _clip,
    "LeakyRelu": _leaky_relu,
    "Sigmoid": lambda x, p, out: sigmoid(x, out),
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Silu": _silu,
    "Tanh": lambda x, p, out: np.tanh(x),
}


def _in_float32(function: Callable) -> Callable:
    """``function`` for float16 arrays: computed in float32 and rounded back once, as ONNX Runtime
    does on CPUs (numpy's float16 arithmetic rounds every step, a HardSwish's four, and runs
    element by element, several times slower than float32)."""

    def widened(x, params, out):
        wide = x.astype(np.float32)
        result = function(wide, params, wide)
        if out is None:
            return result.astype(np.float16)
        np.copyto(out, result, casting="same_kind")
        return out

    return widened


def _implementation(name: str, dtype: np.dtype) -> Callable:
    function = _ACTIVATIONS[name]
    return _in_float32(function) if dtype == np.float16 else function


def apply(x: np.ndarray, name: str, params: Sequence[float]) -> np.ndarray:
    """Apply the fused activation ``name`` to ``x`` (in place when ``x`` is writable); float16
    computed in float32 and rounded once."""
    return _implementation(name, x.dtype)(x, tuple(params), x if x.flags.writeable else None)


def apply_into(x: np.ndarray, out: np.ndarray, name: str, params: Sequence[float]) -> None:
    """Write the activation of ``x`` into ``out`` (same shape; ``out`` may be ``x``): the values
    :func:`apply` gives, bit for bit, in one pass for Relu and Clip."""
    result = _implementation(name, x.dtype)(x, tuple(params), out)
    if result is not out:
        np.copyto(out, result)


def _bounds(name: str, params: tuple, dtype) -> tuple | None:
    """Relu's and Clip's bounds typed as ``dtype`` (a float type) for the clip ufunc, as _relu
    and _clip pass them, each a 0-d array: the ufunc converts a numpy scalar into one on every
    call (0.6 µs of a small map's 1.5 µs clip). None for other activations and types."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or name not in ("Relu", "Clip"):
        return None
    low, high = (0, np.inf) if name == "Relu" else (params[0], params[1])
    bounds = np.array(dtype.type(low)), np.array(dtype.type(high))
    for bound in bounds:
        bound.flags.writeable = False
    return bounds


def into(name: str, params: Sequence[float], dtype) -> Callable[[np.ndarray, np.ndarray], None]:
    """:func:`apply_into` for arrays of ``dtype`` with the activation decided once: ``f(x, out)``.
    Relu and Clip of a float type are then the one clip ufunc call with its bounds already typed
    (for kernels whose small maps are mostly per-call overhead)."""
    fixed = tuple(params)
    bounds = _bounds(name, fixed, dtype)
    if bounds is not None:
        low, high = bounds

        def bounded(x: np.ndarray, out: np.ndarray) -> None:
            clip(x, low, high, out=out)

        return bounded
    function = _implementation(name, np.dtype(dtype))

    def activate(x: np.ndarray, out: np.ndarray) -> None:
        result = function(x, fixed, out)
        if result is not out:
            np.copyto(out, result)

    return activate


def in_place(name: str, params: Sequence[float], dtype=None) -> Callable[[np.ndarray], None]:
    """A function applying the activation ``name`` to a writable array in place, with what can be
    decided once already decided (for kernels that apply the same activation on every call):
    the values :func:`apply` gives, bit for bit. Given the arrays' ``dtype``, Relu and Clip of a
    float type are the one clip call with typed bounds (see :func:`into`)."""
    bounds = None if dtype is None else _bounds(name, tuple(params), dtype)
    if bounds is not None:
        low, high = bounds

        def bounded(x: np.ndarray) -> None:
            clip(x, low, high, out=x)

        return bounded
    fixed = tuple(params)
    plain, widened = _ACTIVATIONS[name], _implementation(name, np.dtype(np.float16))

    def activate(x: np.ndarray) -> None:
        result = (widened if x.dtype == np.float16 else plain)(x, fixed, x)
        if result is not x:
            np.copyto(x, result)

    return activate
