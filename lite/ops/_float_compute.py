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


def widen_float16_constants(constants, shapes, **_) -> tuple | None:
    """The ``prepare`` hook (see lite.ops.registry) of kernels that compute float16 in float32:
    each float16 constant input widened once, at load, read-only like the constants it
    replaces (None in the other places); None when there is none. Widening a 1024x1000 weight
    on every call took longer than the product it fed."""
    widened = tuple(_widened(value) for value in constants)
    return widened if any(value is not None for value in widened) else None


def _widened(value) -> np.ndarray | None:
    if not isinstance(value, np.ndarray) or value.dtype != np.float16:
        return None
    wide = value.astype(np.float32)
    wide.flags.writeable = False
    return wide


def widened_inputs(inputs: tuple, prepared: tuple | None) -> tuple:
    """``inputs`` (float16 or None) in float32, taking the ones ``prepared`` widened at load."""
    prepared = prepared or (None,) * len(inputs)
    return tuple(
        wide if wide is not None else (None if value is None else np.asarray(value).astype(np.float32, copy=False))
        for value, wide in zip(inputs, prepared + (None,) * (len(inputs) - len(prepared)))
    )
