"""Trilu: keep the upper (``upper=1``) or lower triangle of the last two axes, zero the rest.
https://onnx.ai/onnx/operators/onnx__Trilu.html

The optional scalar ``k`` shifts the diagonal (positive: above the main diagonal).
"""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import scalar_int
from lite.ops.registry import kernel


@kernel("Trilu", since=14)
def Trilu(input, k=None, *, upper=1):
    offset = 0 if k is None else scalar_int("Trilu", "k", k)
    return np.triu(input, offset) if upper else np.tril(input, offset)
