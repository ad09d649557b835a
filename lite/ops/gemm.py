"""Gemm: Y = alpha * op(A) @ op(B) + beta * C, op() an optional transpose; C broadcasts.

https://onnx.ai/onnx/operators/onnx__Gemm.html (C optional from opset 11; opset 1's
``broadcast`` attribute is accepted, numpy broadcasting covers it).

The product lands in a buffer from ``allocate``; alpha, C and the node's fused activation are
then applied to it in place (see the kernel contract in :mod:`lite.ops.registry`).

float16 runs in float32, as ONNX Runtime runs it on CPUs: constant inputs widened once at load,
the product, C and the activation in float32, one rounding to float16 at the end.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops import _parallel as parallel
from lite.ops import fused_activation as activations
from lite.ops._float_compute import widen_float16_constants, widened_inputs
from lite.ops.registry import kernel


@kernel("Gemm", since=1, prepare=widen_float16_constants)
def Gemm(
    A, B, C=None, *, alpha=1.0, beta=1.0, broadcast=0, transA=0, transB=0, fused_activation=None, prepared=None,
    allocate=np.empty
):
    if A.ndim != 2 or B.ndim != 2:
        raise UnsupportedOpError(f"Gemm: A and B must be 2-D, got shapes {A.shape} and {B.shape}")
    dtype = A.dtype
    if dtype == np.float16:
        # float32 throughout, the activation included, and one rounding at the end (see module doc).
        A, B, C = widened_inputs((A, B, C), prepared)
    compute = A.dtype
    a = A.T if transA else A
    b = B.T if transB else B
    y = allocate((a.shape[0], b.shape[1]), compute)
    parallel.matmul(a, b.astype(compute, copy=False), y)
    if alpha != 1.0:
        y *= compute.type(alpha)
    if C is not None and beta != 0.0:
        c = np.asarray(C, dtype=compute)
        y += c if beta == 1.0 else c * compute.type(beta)
    if fused_activation is not None:
        y = activations.apply(y, *fused_activation)
    return y.astype(dtype, copy=False)
