"""Dropout. https://onnx.ai/onnx/operators/onnx__Dropout.html

At inference (the default, and always before opset 12) the output is the input and the
optional ``mask`` is all true: bool from opset 10, the input's type before (all ones).
From opset 12 ``ratio`` and ``training_mode`` are inputs; in training mode elements are
zeroed with probability ``ratio`` and the rest scaled by ``1 / (1 - ratio)``, drawing from a
generator seeded with ``seed`` when given.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Dropout", since=12)
def Dropout(data, ratio=None, training_mode=None, *, seed=None):
    data = np.asarray(data)
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(()))
    rate = 0.5 if ratio is None else float(np.asarray(ratio).reshape(()))
    if not training or rate == 0:
        return data, np.ones(data.shape, dtype=np.bool_)
    if not 0 <= rate < 1:
        raise KernelError(f"Dropout: ratio must lie in [0, 1), got {rate}")
    keep = np.random.default_rng(seed).random(data.shape) >= rate
    scaled = np.where(keep, data / (1 - rate), 0).astype(data.dtype, copy=False)
    return scaled, keep


@kernel("Dropout", since=10)
def Dropout_v10(data, *, ratio=0.5):
    data = np.asarray(data)
    return data, np.ones(data.shape, dtype=np.bool_)


@kernel("Dropout", since=1)
def Dropout_v1(data, *, ratio=0.5, is_test=0, consumed_inputs=None):
    """Opset 1-9: inference only (``is_test`` is ignored); the mask has the input's type."""
    data = np.asarray(data)
    return data, np.ones(data.shape, dtype=data.dtype)
