"""Transpose: permute the axes. https://onnx.ai/onnx/operators/onnx__Transpose.html

Without ``perm`` the axes are reversed.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Transpose", since=1)
def Transpose(data, *, perm=None):
    data = np.asarray(data)
    if perm is None:
        return np.transpose(data)
    if len(perm) == data.ndim and min(perm, default=0) >= 0:
        # numpy checks the rest (an axis out of range or named twice): a model runs many small
        # Transposes, so the check below runs only to name what numpy refused.
        try:
            return data.transpose(perm)
        except (ValueError, TypeError):
            pass
    if sorted(perm) != list(range(data.ndim)):
        raise KernelError(f"Transpose: perm {list(perm)} is not a permutation of the {data.ndim} axes")
    return np.transpose(data, perm)
