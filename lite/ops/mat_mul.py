"""MatMul: numpy-style matrix product (broadcast batch axes, 1-D operands promoted and dropped).

https://onnx.ai/onnx/operators/onnx__MatMul.html
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


@kernel("MatMul", since=1)
def MatMul(A, B):
    if A.dtype == np.float16:
        return np.asarray(np.matmul(A.astype(np.float32), B.astype(np.float32))).astype(np.float16)
    # 1-D @ 1-D gives a numpy scalar; the spec wants a 0-d tensor.
    return np.asarray(np.matmul(A, B))
