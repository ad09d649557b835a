"""CenterCropPad: crop or zero-pad chosen axes to a target shape, keeping the content centred.

https://onnx.ai/onnx/operators/onnx__CenterCropPad.html

Cropping drops ``(in - out) // 2`` cells at the start (the odd cell comes off the end);
padding adds ``(out - in) // 2`` zeros at the start (the odd one goes at the end).
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


@kernel("CenterCropPad", since=18)
def CenterCropPad(input_data, shape, *, axes=None):
    x = np.asarray(input_data)
    rank = x.ndim
    axes = list(range(rank)) if not axes else [a + rank if a < 0 else a for a in axes]
    sizes = [int(v) for v in np.asarray(shape).reshape(-1)]
    if len(sizes) != len(axes):
        raise UnsupportedOpError(f"CenterCropPad: shape has {len(sizes)} entries for {len(axes)} axes")
    out_shape = list(x.shape)
    source = [slice(None)] * rank
    target = [slice(None)] * rank
    for axis, size in zip(axes, sizes):
        current = x.shape[axis]
        out_shape[axis] = size
        if size <= current:
            start = (current - size) // 2
            source[axis] = slice(start, start + size)
        else:
            start = (size - current) // 2
            target[axis] = slice(start, start + current)
    y = np.zeros(out_shape, dtype=x.dtype)
    y[tuple(target)] = x[tuple(source)]
    return y
