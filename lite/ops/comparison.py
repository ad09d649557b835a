"""Elementwise comparisons (boolean results) and Where, with numpy broadcasting.

Specs: https://onnx.ai/onnx/operators/onnx__Equal.html, onnx__Less.html,
onnx__LessOrEqual.html, onnx__Greater.html, onnx__GreaterOrEqual.html, onnx__Where.html.
"""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import legacy_broadcast
from lite.ops.registry import kernel


def _boolean(result) -> np.ndarray:
    # Comparisons of object (string) arrays may come back as object arrays.
    return np.asarray(result, dtype=np.bool_)


@kernel("Equal", since=7)
def Equal(A, B):
    return _boolean(np.equal(A, B))


@kernel("Less", since=7)
def Less(A, B):
    return _boolean(np.less(A, B))


@kernel("LessOrEqual", since=12)
def LessOrEqual(A, B):
    return _boolean(np.less_equal(A, B))


@kernel("Greater", since=7)
def Greater(A, B):
    return _boolean(np.greater(A, B))


@kernel("GreaterOrEqual", since=12)
def GreaterOrEqual(A, B):
    return _boolean(np.greater_equal(A, B))


@kernel("Equal", since=1)
def Equal_v1(A, B, *, broadcast=0, axis=None):
    return Equal(A, legacy_broadcast("Equal", A, B, broadcast, axis))


@kernel("Less", since=1)
def Less_v1(A, B, *, broadcast=0, axis=None):
    return Less(A, legacy_broadcast("Less", A, B, broadcast, axis))


@kernel("Greater", since=1)
def Greater_v1(A, B, *, broadcast=0, axis=None):
    return Greater(A, legacy_broadcast("Greater", A, B, broadcast, axis))


@kernel("Where", since=9)
def Where(condition, X, Y):
    return np.where(condition, X, Y)
