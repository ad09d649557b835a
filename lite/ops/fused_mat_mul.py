"""FusedMatMul (com.microsoft): MatMul with transposed operands and a scale, as ONNX Runtime's
graph optimizer fuses ``Transpose -> MatMul -> Mul``.

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.FusedMatMul

``Y = alpha * op(A) @ op(B)`` where, for an operand of rank n >= 3:

- ``transBatchA``/``transBatchB``: its first axis moves behind the batch axes, just before the
  last: ``(d0, d1, ..., dn-2, dn-1) -> (d1, ..., dn-2, d0, dn-1)``;
- then ``transA``/``transB`` swap its last two axes.

Rank-1 operands are promoted as MatMul promotes them (a row for A, a column for B).
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


def _operand(value, trans_batch: int, trans: int) -> np.ndarray:
    value = np.asarray(value)
    if trans_batch and value.ndim >= 3:
        value = np.moveaxis(value, 0, -2)
    if trans and value.ndim >= 2:
        value = np.swapaxes(value, -1, -2)
    return value


@kernel("FusedMatMul", since=1, domain="com.microsoft")
def FusedMatMul(A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    product = np.matmul(_operand(A, transBatchA, transA), _operand(B, transBatchB, transB))
    if alpha != 1.0:
        product = product * product.dtype.type(alpha)
    return product
