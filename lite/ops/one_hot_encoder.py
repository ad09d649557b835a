"""OneHotEncoder (ai.onnx.ml): one float column per category, 1 where the element is that category.

https://onnx.ai/onnx/operators/onnx_aionnxml_OneHotEncoder.html. Y has X's shape plus a last axis of
``len(cats_int64s or cats_strings)``; float elements are looked up as integers. An element of no
category gives a row of zeros when ``zeros`` is 1 and is an error when it is 0.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel
from lite.ops.string_ops import as_text


@kernel("OneHotEncoder", since=1, domain="ai.onnx.ml")
def OneHotEncoder(X, *, cats_int64s=None, cats_strings=None, zeros=1):
    X = np.asarray(X)
    if cats_strings is not None and len(cats_strings):
        categories, values = as_text(list(cats_strings), None), as_text(X, "X")
    elif cats_int64s is not None and len(cats_int64s):
        categories = np.asarray(list(cats_int64s), dtype=np.int64)
        if X.dtype == object:
            raise KernelError("OneHotEncoder: X holds strings but the categories are cats_int64s")
        values = X.astype(np.int64)
    else:
        raise KernelError("OneHotEncoder: needs cats_int64s or cats_strings")
    encoded = (values[..., None] == categories).astype(np.float32)
    if not zeros and not encoded.any(axis=-1).all():
        unknown = values[~encoded.any(axis=-1)].reshape(-1)[:5].tolist()
        raise KernelError(f"OneHotEncoder: {unknown} are not among the categories and zeros=0")
    return encoded
