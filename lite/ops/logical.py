"""Boolean logic, bitwise operations and shifts, with numpy broadcasting.

Specs: https://onnx.ai/onnx/operators/onnx__And.html, onnx__Or.html, onnx__Xor.html,
onnx__Not.html, onnx__BitwiseAnd.html, onnx__BitwiseOr.html, onnx__BitwiseXor.html,
onnx__BitwiseNot.html, onnx__BitShift.html.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import legacy_broadcast
from lite.ops.registry import kernel


@kernel("And", since=7)
def And(A, B):
    return np.logical_and(A, B)


@kernel("Or", since=7)
def Or(A, B):
    return np.logical_or(A, B)


@kernel("Xor", since=7)
def Xor(A, B):
    return np.logical_xor(A, B)


@kernel("Not", since=1)
def Not(X):
    return np.logical_not(X)


@kernel("And", since=1)
def And_v1(A, B, *, broadcast=0, axis=None):
    return And(A, legacy_broadcast("And", A, B, broadcast, axis))


@kernel("Or", since=1)
def Or_v1(A, B, *, broadcast=0, axis=None):
    return Or(A, legacy_broadcast("Or", A, B, broadcast, axis))


@kernel("Xor", since=1)
def Xor_v1(A, B, *, broadcast=0, axis=None):
    return Xor(A, legacy_broadcast("Xor", A, B, broadcast, axis))


@kernel("BitwiseAnd", since=18)
def BitwiseAnd(A, B):
    return np.bitwise_and(A, B)


@kernel("BitwiseOr", since=18)
def BitwiseOr(A, B):
    return np.bitwise_or(A, B)


@kernel("BitwiseXor", since=18)
def BitwiseXor(A, B):
    return np.bitwise_xor(A, B)


@kernel("BitwiseNot", since=18)
def BitwiseNot(X):
    return np.bitwise_not(X)


@kernel("BitShift", since=11)
def BitShift(X, Y, *, direction):
    """Shift X by Y bits. Signed right shifts are arithmetic (opset 28 wording).

    Shifts by a negative amount or by the bit width or more give the sign fill: -1 for a right
    shift of a negative value, 0 otherwise.
    """
    X = np.asarray(X)
    # numpy defines out-of-range shifts exactly as the spec does (the amount is compared as
    # unsigned), so equal operand types are all that is needed.
    amount = np.asarray(Y).astype(X.dtype, copy=False)
    if direction == "LEFT":
        result = np.left_shift(X, amount)
    elif direction == "RIGHT":
        result = np.right_shift(X, amount)
    else:
        raise KernelError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return np.asarray(result).astype(X.dtype, copy=False)
