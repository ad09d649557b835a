"""ReverseSequence: reverse the first ``sequence_lens[b]`` steps of every batch entry ``b``.
https://onnx.ai/onnx/operators/onnx__ReverseSequence.html

Steps beyond a sequence's length stay in place.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis
from lite.ops.registry import kernel


@kernel("ReverseSequence", since=10)
def ReverseSequence(input, sequence_lens, *, batch_axis=1, time_axis=0):
    input = np.asarray(input)
    lengths = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    batch_axis = normalize_axis("ReverseSequence", batch_axis, input.ndim)
    time_axis = normalize_axis("ReverseSequence", time_axis, input.ndim)
    steps, batches = input.shape[time_axis], input.shape[batch_axis]
    if batch_axis == time_axis or lengths.size != batches:
        raise KernelError(
            f"ReverseSequence: need distinct batch/time axes and {batches} lengths, got axes "
            f"{batch_axis}/{time_axis} and {lengths.size} lengths"
        )
    if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
        raise KernelError(f"ReverseSequence: lengths must lie in [0, {steps}], got {lengths.tolist()}")
    # source[t, b]: the step read for output step t of batch entry b.
    t = np.arange(steps)[:, None]
    source = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)
    shape = [1] * input.ndim
    shape[time_axis], shape[batch_axis] = steps, batches
    if time_axis > batch_axis:
        source = source.T
    source = source.reshape(shape)
    return np.take_along_axis(input, np.broadcast_to(source, input.shape), axis=time_axis)
