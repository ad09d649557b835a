"""MaxUnpool: place each pooled value back at the position its MaxPool index names; zeros elsewhere.

https://onnx.ai/onnx/operators/onnx__MaxUnpool.html

The unpooled shape is ``(N, C, (in - 1) * stride - pad_begin - pad_end + kernel, ...)``; the
indices ``I`` are row-major positions in a tensor of that shape (as MaxPool's second output
gives them). An ``output_shape`` input enlarges the result: the unpooled block sits at its
start and the rest is zero, which is what the ONNX backend tests expect.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list
from lite.ops.registry import kernel


@kernel("MaxUnpool", since=9)
def MaxUnpool(X, I, output_shape=None, *, kernel_shape, pads=None, strides=None):
    X = np.asarray(X)
    spatial = X.ndim - 2
    if spatial < 1 or len(kernel_shape) != spatial:
        raise KernelError(f"MaxUnpool: kernel_shape {kernel_shape} does not match X of shape {X.shape}")
    strides = strides or [1] * spatial
    pads = pads or [0] * (2 * spatial)
    unpooled_shape = list(X.shape[:2]) + [
        (X.shape[2 + d] - 1) * strides[d] - pads[d] - pads[spatial + d] + kernel_shape[d] for d in range(spatial)
    ]
    indices = np.asarray(I).astype(np.int64, copy=False).reshape(-1)
    size = int(np.prod(unpooled_shape))
    if indices.shape[0] != X.size or np.any((indices < 0) | (indices >= size)):
        raise KernelError(f"MaxUnpool: I must hold one index in [0, {size}) per element of X of shape {X.shape}")
    unpooled = np.zeros(size, dtype=X.dtype)
    unpooled[indices] = X.reshape(-1)
    unpooled = unpooled.reshape(unpooled_shape)
    if output_shape is None:
        return unpooled
    shape = int_list(output_shape)
    if len(shape) != X.ndim or any(want < have for want, have in zip(shape, unpooled_shape)):
        raise KernelError(f"MaxUnpool: output_shape {shape} is smaller than the unpooled shape {unpooled_shape}")
    output = np.zeros(shape, dtype=X.dtype)
    output[tuple(slice(0, extent) for extent in unpooled_shape)] = unpooled
    return output
