"""Range: ``start, start + delta, ...`` up to (excluding) ``limit``.
https://onnx.ai/onnx/operators/onnx__Range.html

The element count is ``max(ceil((limit - start) / delta), 0)`` and element ``i`` is
``start + i * delta``, computed in the input's type (integers exactly). float16 inputs are
computed in float32 and rounded once (opset 27's ``stash_type=1``, its default).
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Range", since=11)
def Range(start, limit, delta, *, stash_type=1):
    start = np.asarray(start).reshape(())
    dtype = start.dtype
    if dtype.kind in "iu":
        first, stop, step = int(start), int(np.asarray(limit).reshape(())), int(np.asarray(delta).reshape(()))
        if step == 0:
            raise KernelError("Range: delta must be non-zero")
        count = max(-(-(stop - first) // step), 0)
        return (first + np.arange(count, dtype=np.int64) * step).astype(dtype)
    compute = np.dtype(np.float32) if dtype == np.float16 else dtype
    first = start.astype(compute)
    stop = float(np.asarray(limit).reshape(()))
    step = np.asarray(delta).astype(compute).reshape(())
    if step == 0:
        raise KernelError("Range: delta must be non-zero")
    count = max(math.ceil((stop - float(first)) / float(step)), 0)
    return (first + np.arange(count, dtype=compute) * step).astype(dtype)
