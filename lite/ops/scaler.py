"""Scaler (ai.onnx.ml): ``Y = (X - offset) * scale``, per feature (a single value applies to all).

https://onnx.ai/onnx/operators/onnx_aionnxml_Scaler.html; Y is float32, as the spec types it.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Scaler", since=1, domain="ai.onnx.ml")
def Scaler(X, *, offset=None, scale=None):
    X = np.asarray(X)
    offsets = np.asarray(offset if offset is not None else [0.0], dtype=np.float32)
    scales = np.asarray(scale if scale is not None else [1.0], dtype=np.float32)
    width = X.shape[-1] if X.ndim else 1
    for name, values in (("offset", offsets), ("scale", scales)):
        if values.size not in (1, width):
            raise KernelError(f"Scaler: {name} has {values.size} values, X has {width} features (want 1 or {width})")
    return ((X.astype(np.float32) - offsets) * scales).astype(np.float32)
