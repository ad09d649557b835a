"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly in int32.

https://onnx.ai/onnx/operators/onnx__MatMulInteger.html (a_zero_point per row of A's last
two axes, i.e. along axis -2; b_zero_point per column, along axis -1)
"""

from __future__ import annotations

import numpy as np

from lite.ops._quant_common import to_int32
from lite.ops.registry import kernel


def centered_operands(A, B, a_zero_point, b_zero_point):
    a = np.asarray(A).astype(np.float64)
    b = np.asarray(B).astype(np.float64)
    if a_zero_point is not None:
        zero = np.asarray(a_zero_point).astype(np.float64)
        # A 1-D a_zero_point holds one value per row of A.
        a = a - (zero.reshape(-1, 1) if zero.ndim == 1 and a.ndim >= 2 else zero)
    if b_zero_point is not None:
        b = b - np.asarray(b_zero_point).astype(np.float64)
    return a, b


@kernel("MatMulInteger", since=10)
def MatMulInteger(A, B, a_zero_point=None, b_zero_point=None):
    a, b = centered_operands(A, B, a_zero_point, b_zero_point)
    return to_int32(np.matmul(a, b))
