"""MatMul: numpy-style matrix product (broadcast batch axes, 1-D operands promoted and dropped).

https://onnx.ai/onnx/operators/onnx__MatMul.html
"""

from __future__ import annotations

import numpy as np

from lite.ops import _gemm_blocks as gemm_blocks
from lite.ops import _parallel as parallel
from lite.ops._float_compute import widen_float16_constants, widened_inputs
from lite.ops.registry import kernel

_BLOCKS_FROM = gemm_blocks.BLOCK_MULTIPLY_ADDS  # smaller products: numpy's matmul straight away


@kernel("MatMul", since=1, prepare=widen_float16_constants)
def MatMul(A, B, *, prepared=None):
    if A.dtype == np.float16:
        # In float32 (constant weights widened once, at load), rounded to float16 once, as ONNX
        # Runtime does on CPUs; through the float32 paths below, which use BLAS.
        return MatMul(*widened_inputs((A, B), prepared)).astype(np.float16)
    if A.ndim >= 2 and B.ndim == 2:
        multiply_adds = A.size * B.shape[1]
        if multiply_adds > _BLOCKS_FROM:
            if (multiply_adds >= parallel.SPLIT_MULTIPLY_ADDS and A.dtype == B.dtype and A.dtype.kind == "f"
                    and A.flags.c_contiguous):
                # (..., M, K) @ (K, N) is one (rows, K) @ (K, N) product, which large models split across cores.
                out = np.empty(A.shape[:-1] + (B.shape[1],), A.dtype)
                parallel.matmul(A.reshape(-1, A.shape[-1]), B, out.reshape(-1, B.shape[1]))
                return out
            if gemm_blocks.suits(A, B):
                # Constant weights: in blocks where OpenBLAS is slow (lite.ops._gemm_blocks).
                return gemm_blocks.product(A, B)
    # 1-D @ 1-D gives a numpy scalar; the spec wants a 0-d tensor.
    return np.asarray(np.matmul(A, B))
