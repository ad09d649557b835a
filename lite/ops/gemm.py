"""Gemm: Y = alpha * op(A) @ op(B) + beta * C, op() an optional transpose; C broadcasts.

https://onnx.ai/onnx/operators/onnx__Gemm.html (C optional from opset 11; opset 1's
``broadcast`` attribute is accepted, numpy broadcasting covers it).

The product lands in a buffer from ``allocate``; alpha, C and the node's fused activation are
then applied to it in place (see the kernel contract in :mod:`lite.ops.registry`).
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops import _parallel as parallel
from lite.ops import fused_activation as activations
from lite.ops.registry import kernel


@kernel("Gemm", since=1)
def Gemm(
    A, B, C=None, *, alpha=1.0, beta=1.0, broadcast=0, transA=0, transB=0, fused_activation=None, allocate=np.empty
):
    if A.ndim != 2 or B.ndim != 2:
        raise UnsupportedOpError(f"Gemm: A and B must be 2-D, got shapes {A.shape} and {B.shape}")
    compute = np.dtype(np.float32) if A.dtype == np.float16 else A.dtype
    a = A.T if transA else A
    b = B.T if transB else B
    y = allocate((a.shape[0], b.shape[1]), compute)
    parallel.matmul(a.astype(compute, copy=False), b.astype(compute, copy=False), y)
    if alpha != 1.0:
        y *= compute.type(alpha)
    if C is not None and beta != 0.0:
        c = np.asarray(C, dtype=compute)
        y += c if beta == 1.0 else c * compute.type(beta)
    y = y.astype(A.dtype, copy=False)
    if fused_activation is not None:
        y = activations.apply(y, *fused_activation)
    return y
