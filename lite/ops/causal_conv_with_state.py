"""CausalConvWithState: depthwise causal 1-D convolution that carries its left context.

https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html

``input`` is ``(B, C, L)``, ``weight`` ``(C, 1, k)``. The sequence is extended on the left by
``past_state`` ``(B, C, k - 1)`` (zeros when absent); each channel is then correlated with its
own kernel (valid padding), so output ``t`` sees positions ``t - k + 1 .. t``::

    y[b, c, t] = bias[c] + sum_i weight[c, 0, i] * padded[b, c, t + i]

``activation`` ``silu``/``swish`` applies ``y * sigmoid(y)``. ``present_state`` is the last
``k - 1`` positions of the extended sequence. float16 and bfloat16 are computed in float32.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._float_compute import FloatCompute
from lite.ops.registry import kernel


def _silu(x: np.ndarray) -> np.ndarray:
    decay = np.exp(-np.abs(x))  # e^-|x| never overflows
    return x * np.where(x >= 0, 1 / (1 + decay), decay / (1 + decay))


@kernel("CausalConvWithState", since=27)
def CausalConvWithState(input, weight, bias=None, past_state=None, *, activation="none"):
    if activation not in ("none", "silu", "swish"):
        raise KernelError(f"CausalConvWithState: activation must be 'none', 'silu' or 'swish', got {activation!r}")
    input, weight = np.asarray(input), np.asarray(weight)
    if input.ndim != 3 or weight.ndim != 3 or weight.shape[:2] != (input.shape[1], 1):
        raise KernelError(
            f"CausalConvWithState: need input (B, C, L) and weight (C, 1, k), got {input.shape} and {weight.shape}"
        )
    batch, channels, length = input.shape
    size = weight.shape[2]
    if past_state is None:
        past = np.zeros((batch, channels, size - 1), dtype=input.dtype)
    else:
        past = np.asarray(past_state)
        if past.shape != (batch, channels, size - 1):
            raise KernelError(
                f"CausalConvWithState: past_state must be {(batch, channels, size - 1)}, got {past.shape}"
            )
    padded = np.concatenate((past, input), axis=2)
    precision = FloatCompute("CausalConvWithState", input.dtype)
    values = precision.widen(padded)
    kernels = precision.widen(weight)[:, 0, :]  # (C, k)
    output = np.zeros((batch, channels, length), dtype=precision.compute)
    for offset in range(size):
        output += kernels[np.newaxis, :, offset, np.newaxis] * values[:, :, offset : offset + length]
    if bias is not None:
        output += precision.widen(bias).reshape(1, channels, 1)
    if activation != "none":
        output = _silu(output)
    return precision.narrow(output), padded[:, :, padded.shape[2] - (size - 1) :]
