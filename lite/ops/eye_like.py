"""EyeLike: a 2-D tensor shaped like the input with ones on diagonal ``k``, zeros elsewhere.
https://onnx.ai/onnx/operators/onnx__EyeLike.html

The element type is ``dtype`` when given, else the input's.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import numpy_dtype
from lite.ops.registry import kernel


@kernel("EyeLike", since=9)
def EyeLike(input, *, dtype=None, k=0):
    input = np.asarray(input)
    if input.ndim != 2:
        raise KernelError(f"EyeLike: the input must be 2-D, got shape {input.shape}")
    element_type = input.dtype if dtype is None else numpy_dtype("EyeLike", dtype)
    rows, columns = input.shape
    return np.eye(rows, columns, k=k, dtype=element_type)
