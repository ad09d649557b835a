"""ONNX Runtime's fused activations (com.microsoft): Gelu, BiasGelu, FastGelu, QuickGelu.

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.BiasGelu

ONNX Runtime's transformer optimizer writes them for a feed-forward layer's bias and activation::

    Gelu(X)              = X * (1 + erf(X / sqrt(2))) / 2          (ONNX Gelu, approximate="none")
    BiasGelu(A, B)       = Gelu(A + B)
    FastGelu(X, bias)    = Y * (1 + tanh(sqrt(2/pi) * (Y + 0.044715 Y^3))) / 2,  Y = X (+ bias)
    QuickGelu(X; alpha)  = X * sigmoid(alpha * X),  alpha = 1.702 by default

The erf form is the ONNX Gelu kernel's (lite.ops.activations), so both agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from lite.ops.activations import Gelu as onnx_gelu
from lite.ops.fused_activation import sigmoid
from lite.ops.registry import kernel

_MICROSOFT = "com.microsoft"


@kernel("Gelu", since=1, domain=_MICROSOFT)
def Gelu(X, *, allocate=np.empty):
    return onnx_gelu(X, allocate=allocate)


@kernel("BiasGelu", since=1, domain=_MICROSOFT)
def BiasGelu(A, B, *, allocate=np.empty):
    return onnx_gelu(np.add(A, B), allocate=allocate)


@kernel("FastGelu", since=1, domain=_MICROSOFT)
def FastGelu(X, bias=None):
    if bias is not None:
        X = np.add(X, bias)
    return onnx_gelu(X, approximate="tanh")


@kernel("QuickGelu", since=1, domain=_MICROSOFT)
def QuickGelu(X, *, alpha=1.702):
    X = np.asarray(X)
    gate = sigmoid(X.astype(np.float32, copy=False) * np.float32(alpha))
    return (X * gate).astype(X.dtype, copy=False)
