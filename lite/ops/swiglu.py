"""SwiGLU: the Swish of the gate times the value, ``Y = A * sigmoid(alpha * A) * B``.

https://onnx.ai/onnx/operators/onnx__SwiGLU.html

A and B must have the same shape (no broadcasting).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Written with e^-|x| so neither branch overflows.
    decay = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + decay), decay / (1 + decay))


@kernel("SwiGLU", since=28)
def SwiGLU(A, B, *, alpha=1.0):
    A, B = np.asarray(A), np.asarray(B)
    if A.shape != B.shape:
        raise KernelError(f"SwiGLU: A and B must have the same shape, got {A.shape} and {B.shape}")
    gate = A * _sigmoid(A * A.dtype.type(alpha))
    return (gate * B).astype(A.dtype, copy=False)
