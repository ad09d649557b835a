"""Squeeze and Unsqueeze: remove or insert dimensions of size 1.

Specs: https://onnx.ai/onnx/operators/onnx__Squeeze.html, onnx__Unsqueeze.html.

``axes`` is an attribute before opset 13 and an optional int64 input from then on. Squeeze
without axes removes every dimension of size 1. Unsqueeze's axes refer to the output's rank.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list, normalize_axes
from lite.ops.registry import kernel


@kernel("Squeeze", since=13)
def Squeeze(data, axes=None):
    data = np.asarray(data)
    axes = int_list(axes)
    if axes is None:
        return np.squeeze(data)
    axes = normalize_axes("Squeeze", axes, data.ndim)
    for axis in axes:
        if data.shape[axis] != 1:
            raise KernelError(
                f"Squeeze: axis {axis} of a tensor of shape {data.shape} has size "
                f"{data.shape[axis]}, expected 1"
            )
    return np.squeeze(data, axis=axes)


@kernel("Unsqueeze", since=13)
def Unsqueeze(data, axes):
    data = np.asarray(data)
    axes = axes.tolist() if isinstance(axes, np.ndarray) and axes.ndim == 1 else int_list(axes)
    if axes is None:
        raise KernelError("Unsqueeze: the 'axes' input is required")
    rank = data.ndim + len(axes)
    axes = normalize_axes("Unsqueeze", axes, rank)
    # A reshape is the same view as np.expand_dims, without its argument checks (a few µs on
    # every call of a small model): the output's shape has 1 at each of `axes`.
    shape = iter(data.shape)
    return data.reshape([1 if axis in axes else next(shape) for axis in range(rank)])


@kernel("Squeeze", since=1)
def Squeeze_v1(data, *, axes=None):
    return Squeeze(data, axes)


@kernel("Unsqueeze", since=1)
def Unsqueeze_v1(data, *, axes=None):
    return Unsqueeze(data, axes)
