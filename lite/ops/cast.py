"""Cast and CastLike: convert elements to another type.

Specs: https://onnx.ai/onnx/operators/onnx__Cast.html, onnx__CastLike.html.

``to`` is an element type name (``"FLOAT"``) in opset 1 and a ``TensorProto.DataType`` number
from opset 6. Conversions follow C: floats to integers truncate toward zero, anything non-zero
becomes ``True``. Strings (object arrays) parse as numbers (``"inf"``, ``"NaN"`` and ``"true"``/
``"false"`` included) and numbers format as their shortest round-trip text.

BFLOAT16 results are produced as raw uint16 words (``lite.format.dtypes`` stores bfloat16
that way). The float8 / 4-bit targets, and therefore ``saturate``, are not supported by the
numpy engine.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.format.dtypes import DataType, float32_to_bfloat16
from lite.ops._helpers import numpy_dtype
from lite.ops.registry import kernel

_TRUE_WORDS = {"true": True, "false": False}


def _text_to_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return _TRUE_WORDS[word]
    return float(text) != 0


def _text_to_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        # "3.7" or "1e3": read as a float, then truncate like a numeric cast.
        return int(float(text))


def _parse_text(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # Strings have no vectorized parser in numpy; this loop is the cost of string tensors.
    texts = [v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]
    try:
        if dtype.kind == "b":
            parsed = np.array([_text_to_bool(t) for t in texts], dtype=np.bool_)
        elif dtype.kind in "iu":
            parsed = np.array([_text_to_int(t) for t in texts], dtype=dtype)
        else:
            parsed = np.array([float(t) for t in texts], dtype=np.float64).astype(dtype)
    except (ValueError, OverflowError) as err:
        raise KernelError(f"Cast: cannot convert strings to {dtype}: {err}") from err
    return parsed.reshape(values.shape)


def _cast(input, dtype: np.dtype) -> np.ndarray:
    input = np.asarray(input)
    if dtype.kind == "O":
        return input.astype(str).astype(object)
    if input.dtype.kind in "OUS":
        return _parse_text(input, dtype)
    if input.dtype.kind in "biu" and (dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize >= 4)):
        # Nothing to warn about (integers wrap, every integer has a float32 neighbour): no
        # errstate, which costs more than a small cast (an attention mask's, on every call).
        return input.astype(dtype)
    # Out-of-range float -> int conversions are undefined in the spec; numpy warns about them.
    with np.errstate(invalid="ignore", over="ignore"):
        return input.astype(dtype)


def _cast_to(op_type: str, input, to: int) -> np.ndarray:
    if int(to) == DataType.BFLOAT16:
        return float32_to_bfloat16(np.asarray(input).astype(np.float32))
    return _cast(input, numpy_dtype(op_type, to))


@kernel("Cast", since=6)
def Cast(input, *, to, saturate=1):
    return _cast_to("Cast", input, to)


@kernel("Cast", since=1)
def Cast_v1(input, *, to):
    try:
        element_type = DataType[str(to).upper()]
    except KeyError as err:
        raise KernelError(f"Cast: unknown element type name {to!r}") from err
    return _cast_to("Cast", input, element_type)


@kernel("CastLike", since=15)
def CastLike(input, target_type, *, saturate=1):
    return _cast(input, np.asarray(target_type).dtype)
