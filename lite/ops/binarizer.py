"""Binarizer (ai.onnx.ml): 1 where ``X > threshold``, else 0, in X's type.

https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


@kernel("Binarizer", since=1, domain="ai.onnx.ml")
def Binarizer(X, *, threshold=0.0):
    X = np.asarray(X)
    return (X > threshold).astype(X.dtype)
