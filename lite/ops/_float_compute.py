"""The compute type of float kernels that accept float16, bfloat16, float and double.

Attention-style kernels compute narrow types in float32 and double in double, then round back.
The numpy engine keeps bfloat16 as raw uint16 words (see ``lite.format.dtypes``); these ops
accept only float types, so a uint16 input can only be bfloat16.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.format.dtypes import bfloat16_to_float32, float32_to_bfloat16


class FloatCompute:
    """How one input element type maps to the compute type (``widen``) and back (``narrow``)."""

    def __init__(self, op_type: str, dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        self.is_bfloat16 = self.dtype == np.uint16
        if self.dtype.kind != "f" and not self.is_bfloat16:
            raise KernelError(f"{op_type}: expected a float tensor, got {self.dtype}")
        self.compute = np.dtype(np.float64) if self.dtype == np.float64 else np.dtype(np.float32)

    def widen(self, value: np.ndarray) -> np.ndarray:
        if self.is_bfloat16:
            return bfloat16_to_float32(value)
        return np.asarray(value).astype(self.compute, copy=False)

    def narrow(self, value: np.ndarray) -> np.ndarray:
        if self.is_bfloat16:
            return float32_to_bfloat16(np.asarray(value).astype(np.float32, copy=False))
        return np.asarray(value).astype(self.dtype, copy=False)


def round_to_precision(values: np.ndarray, element_type: int | None, op_type: str) -> np.ndarray:
    """``values`` as seen at ONNX element type ``element_type`` (1, 10, 11, 16); None keeps them."""
    if element_type is None or element_type == 1:
        return values
    if element_type == 11:
        return values.astype(np.float64)
    if element_type == 10:
        return values.astype(np.float16).astype(values.dtype)
    if element_type == 16:
        return bfloat16_to_float32(float32_to_bfloat16(values.astype(np.float32)))
    raise KernelError(
        f"{op_type}: softmax_precision {element_type} is not supported "
        "(expected 1 float, 10 float16, 11 double or 16 bfloat16)"
    )
