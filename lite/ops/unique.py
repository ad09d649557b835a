"""Unique: the distinct elements (or slices along ``axis``) of a tensor.
https://onnx.ai/onnx/operators/onnx__Unique.html

Outputs: ``Y`` the unique values, ``indices`` the first occurrence of each, ``inverse_indices``
the position in ``Y`` of every input element (or slice), ``counts``; the last three int64.
``sorted=1`` orders ``Y`` ascending; ``sorted=0`` keeps the order of first occurrence.
"""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


@kernel("Unique", since=11)
def Unique(X, *, axis=None, sorted=1):
    X = np.asarray(X)
    if axis is None:
        X = X.reshape(-1)
        axis = 0
    axis = normalize_axis("Unique", axis, X.ndim)
    values, first, inverse, counts = np.unique(
        X, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        # Renumber the sorted uniques in order of first appearance.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=axis)
        first = first[order]
        counts = counts[order]
        inverse = rank[inverse]
    as_int64 = [np.asarray(a, dtype=np.int64) for a in (first, inverse, counts)]
    return (values, *as_int64)
