"""QLinearMatMul: quantized MatMul, requantized to the output's scale and zero point.

https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html

y = saturate(round((a - a_zp) @ (b - b_zp) * a_scale * b_scale / y_scale) + y_zp)
"""

from __future__ import annotations

import numpy as np

from lite.ops._quant_common import requantize
from lite.ops.mat_mul_integer import integer_product, prepare_b
from lite.ops.registry import kernel


def prepare_qlinear_mat_mul(constants, shapes, **_):
    """Load-time work: the constant b centred once (see lite.ops.mat_mul_integer)."""
    _, _, _, b, _, b_zero_point = (list(constants) + [None] * 6)[:6]
    return prepare_b(b, b_zero_point)


@kernel("QLinearMatMul", since=10, prepare=prepare_qlinear_mat_mul)
def QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, *, prepared=None):
    accumulated = np.rint(integer_product(a, b, a_zero_point, b_zero_point, prepared))
    row_scale = np.asarray(a_scale)
    if row_scale.ndim == 1 and row_scale.size > 1:
        row_scale = row_scale.reshape(-1, 1)
    multiplier = row_scale * np.asarray(b_scale) / np.asarray(y_scale)
    dtype = np.asarray(y_zero_point if y_zero_point is not None else a).dtype
    return requantize(accumulated, multiplier, y_zero_point, dtype)
