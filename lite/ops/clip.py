"""Clip: limit every element to ``[min, max]``. https://onnx.ai/onnx/operators/onnx__Clip.html

- opset 1: ``min``/``max`` attributes, a missing one leaves that side open;
- opset 6: the attributes default to the float limits (±3.4028234663852886e38);
- opset 11 on: ``min`` and ``max`` are optional scalar inputs. When min > max every element
  becomes max (``min(max(x, lo), hi)``).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel

_FLOAT_MAX = 3.4028234663852886e38


def _clip(input: np.ndarray, low, high) -> np.ndarray:
    input = np.asarray(input)
    result = input
    # The opset-6 defaults overflow to ±inf in float16, which still means "no bound".
    with np.errstate(over="ignore"):
        if low is not None:
            result = np.maximum(result, np.asarray(low).astype(input.dtype))
        if high is not None:
            result = np.minimum(result, np.asarray(high).astype(input.dtype))
    return np.asarray(result).astype(input.dtype, copy=False)


def _scalar_bound(name: str, bound: np.ndarray | None) -> np.ndarray | None:
    if bound is None:
        return None
    bound = np.asarray(bound)
    if bound.size != 1:
        raise KernelError(f"Clip: input '{name}' must be a scalar, got shape {bound.shape}")
    return bound.reshape(())


@kernel("Clip", since=11)
def Clip(input, min=None, max=None):
    return _clip(input, _scalar_bound("min", min), _scalar_bound("max", max))


@kernel("Clip", since=6)
def Clip_v6(input, *, min=-_FLOAT_MAX, max=_FLOAT_MAX):
    return _clip(input, min, max)


@kernel("Clip", since=1)
def Clip_v1(input, *, min=None, max=None, consumed_inputs=None):
    return _clip(input, min, max)
