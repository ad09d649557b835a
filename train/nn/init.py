"""Weight initializers named as ``mindspore.common.initializer`` names them.

Defaults (reference §5): Conv2d and Dense weights ``HeUniform(sqrt(5))``, i.e. uniform in
±1/sqrt(fan_in); biases ``Uniform(1/sqrt(fan_in))``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from train.errors import ShapeError
from train.random import generator
from train.tensor import Tensor


def fan_in(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])


def initialize(init: Any, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """An array for ``init``: a name ('he_uniform', 'normal', 'zeros', ...), a number or an array."""
    if init is None:
        init = "he_uniform"
    if isinstance(init, Tensor):
        init = init.data
    if isinstance(init, np.ndarray):
        if init.shape != tuple(shape):
            raise ShapeError(f"initializer array has shape {init.shape}, expected {tuple(shape)}")
        return init.astype(dtype)
    if isinstance(init, (int, float)):
        return np.full(shape, init, dtype=dtype)
    rng = generator()
    name = str(init).lower()
    if name == "zeros":
        return np.zeros(shape, dtype)
    if name == "ones":
        return np.ones(shape, dtype)
    if name == "normal":  # mindspore Normal(sigma=0.01)
        return (rng.standard_normal(shape) * 0.01).astype(dtype)
    if name in ("he_uniform", "heuniform"):
        bound = 1.0 / math.sqrt(fan_in(shape))  # HeUniform(negative_slope=sqrt(5))
        return rng.uniform(-bound, bound, shape).astype(dtype)
    if name in ("he_normal", "henormal"):
        return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in(shape))).astype(dtype)
    if name in ("xavier_uniform", "xavieruniform"):
        fan_out = shape[0] * (int(np.prod(shape[2:])) if len(shape) > 2 else 1)
        bound = math.sqrt(6.0 / (fan_in(shape) + fan_out))
        return rng.uniform(-bound, bound, shape).astype(dtype)
    raise ShapeError(
        f"unknown initializer {init!r}; use 'he_uniform', 'he_normal', 'xavier_uniform', "
        f"'normal', 'zeros', 'ones', a number or an array"
    )


def uniform_bias(size: int, fan: int, dtype: Any = np.float32) -> np.ndarray:
    bound = 1.0 / math.sqrt(fan)
    return generator().uniform(-bound, bound, (size,)).astype(dtype)
