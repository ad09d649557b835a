"""MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) accumulated exactly in int32.

https://onnx.ai/onnx/operators/onnx__MatMulInteger.html (a_zero_point per row of A's last
two axes, i.e. along axis -2; b_zero_point per column, along axis -1)

B is nearly always a constant weight: it is centred once at load (``prepare``) instead of
being widened and re-centred on every call, which cost a T5 lm_head ~8x its matmul. The
products stay exact: float32 when every column's sum of ``|b - b_zero_point|`` times the
largest 8-bit ``|a - a_zero_point|`` (255) is at most 2**24, so every partial sum BLAS forms,
in whatever order, is an integer float32 holds exactly; float64 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.ops._quant_common import to_int32
from lite.ops.registry import kernel

# Largest |a - a_zero_point| for an 8-bit A (uint8 with zero point 0..255, int8 with -128..127).
_A_BOUND_8BIT = 255
_FLOAT32_EXACT = 2**24


def _centred_a(A, a_zero_point, dtype) -> np.ndarray:
    a = np.asarray(A).astype(dtype)
    if a_zero_point is None:
        return a
    zero = np.asarray(a_zero_point).astype(dtype)
    # A 1-D a_zero_point holds one value per row of A.
    return a - (zero.reshape(-1, 1) if zero.ndim == 1 and a.ndim >= 2 else zero)


def _centred_b(B, b_zero_point) -> np.ndarray:
    b = np.asarray(B).astype(np.float64)
    return b if b_zero_point is None else b - np.asarray(b_zero_point).astype(np.float64)


def centered_operands(A, B, a_zero_point, b_zero_point):
    return _centred_a(A, a_zero_point, np.float64), _centred_b(B, b_zero_point)


@dataclass(frozen=True)
class PreparedB:
    """The constant B centred on its zero point, in float32 when that stays exact for 8-bit A."""

    b: np.ndarray
    zero_point: np.ndarray | None

    def serves(self, A, b_zero_point) -> bool:
        """Whether this call may use it: the zero point it was centred on, and an 8-bit A
        when it is float32 (its exactness bound assumes |a - a_zero_point| <= 255)."""
        if (b_zero_point is None) != (self.zero_point is None):
            return False
        if b_zero_point is not None and not np.array_equal(b_zero_point, self.zero_point):
            return False
        return self.b.dtype == np.float64 or np.asarray(A).dtype.itemsize == 1


def prepare_b(B, b_zero_point) -> PreparedB | None:
    """Load-time work: B centred once, when B is a constant with at least two axes."""
    if B is None or np.ndim(B) < 2:
        return None
    b = _centred_b(B, b_zero_point)
    column_l1 = np.abs(b).sum(axis=-2).max(initial=0.0)
    if column_l1 * _A_BOUND_8BIT <= _FLOAT32_EXACT:
        b = b.astype(np.float32)
    zero = None if b_zero_point is None else np.array(b_zero_point)
    return PreparedB(b, zero)


def integer_product(A, B, a_zero_point, b_zero_point, prepared: PreparedB | None) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point) as exact integers held in a float array."""
    if prepared is not None and prepared.serves(A, b_zero_point):
        return np.matmul(_centred_a(A, a_zero_point, prepared.b.dtype), prepared.b)
    return np.matmul(*centered_operands(A, B, a_zero_point, b_zero_point))


def prepare_mat_mul_integer(constants, shapes, **_):
    _, B, _, b_zero_point = (list(constants) + [None] * 4)[:4]
    return prepare_b(B, b_zero_point)


@kernel("MatMulInteger", since=10, prepare=prepare_mat_mul_integer)
def MatMulInteger(A, B, a_zero_point=None, b_zero_point=None, *, prepared=None):
    return to_int32(integer_product(A, B, a_zero_point, b_zero_point, prepared))
