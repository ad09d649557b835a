"""Imputer (ai.onnx.ml): replace a sentinel value (NaN by default for floats) with per-feature values.

https://onnx.ai/onnx/operators/onnx_aionnxml_Imputer.html. ``imputed_value_floats`` (or
``_int64s``) holds one value for every feature of X's last axis, or one for all; elements equal to
``replaced_value_float`` (``_int64``) are replaced, and a NaN ``replaced_value_float`` matches NaNs.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Imputer", since=1, domain="ai.onnx.ml")
def Imputer(X, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
            replaced_value_int64=0):
    X = np.asarray(X)
    if X.dtype.kind == "f":
        values, sentinel = imputed_value_floats, replaced_value_float
    else:
        values, sentinel = imputed_value_int64s, replaced_value_int64
    if values is None or not len(values):
        kind = "imputed_value_floats" if X.dtype.kind == "f" else "imputed_value_int64s"
        raise KernelError(f"Imputer: X is {X.dtype} and needs {kind}")
    imputed = np.asarray(values, dtype=X.dtype)
    width = X.shape[-1] if X.ndim else 1
    if imputed.size not in (1, width):
        raise KernelError(f"Imputer: {imputed.size} imputed values for {width} features (want 1 or {width})")
    missing = np.isnan(X) if X.dtype.kind == "f" and np.isnan(sentinel) else X == sentinel
    return np.where(missing, imputed, X)
