"""Attribute normalization shared by the primitive translators.

MindSpore writes enum-valued attributes either as strings (``pad_mode="same"``,
``format="NCHW"``; classic primitives) or, when attributes arrive as inputs, as the enum's
integer (``PadMode``: PAD=0, SAME=1, VALID=2; ``Format``: NCHW=0, NHWC=1)
(``mindspore/core/utils/check_convert_utils.cc``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from converter.mindspore.graph import TranslationError

PAD_MODES = {0: "pad", 1: "same", 2: "valid"}
FORMATS = {0: "NCHW", 1: "NHWC"}


def pad_mode(value: Any) -> str:
    if isinstance(value, (int, np.integer)) and int(value) in PAD_MODES:
        return PAD_MODES[int(value)]
    if isinstance(value, str) and value.lower() in ("same", "valid", "pad"):
        return value.lower()
    raise TranslationError(f"pad_mode {value!r} is not one of 'same', 'valid', 'pad'")


def data_format(value: Any) -> str:
    if isinstance(value, (int, np.integer)) and int(value) in FORMATS:
        return FORMATS[int(value)]
    if isinstance(value, str) and value.upper() in ("NCHW", "NHWC"):
        return value.upper()
    raise TranslationError(f"data format {value!r} is not NCHW or NHWC")


def spatial_pair(value: Any, fmt: str, what: str) -> tuple[int, int]:
    """(h, w) from an int, a pair, or MindSpore's 4-tuple ((1, 1, h, w) NCHW / (1, h, w, 1) NHWC)."""
    items = int_tuple(value, what)
    if len(items) == 1:
        return items[0], items[0]
    if len(items) == 2:
        return items[0], items[1]
    if len(items) == 4:
        return (items[2], items[3]) if fmt == "NCHW" else (items[1], items[2])
    raise TranslationError(f"{what} {value!r} is not an int, a pair or a 4-tuple")


def int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, np.integer)) for v in value):
        return tuple(int(v) for v in value)
    raise TranslationError(f"{what} {value!r} is not an int or a tuple of ints")


def axes(value: Any, what: str = "axis") -> tuple[int, ...] | None:
    """Reduction/squeeze axes: None or () means all axes."""
    if value is None:
        return None
    return int_tuple(value, what)


def flag(value: Any, what: str) -> bool:
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return bool(value)
    if isinstance(value, np.ndarray) and value.size == 1:
        return bool(value.reshape(-1)[0])
    raise TranslationError(f"{what} {value!r} is not a bool")


def onnx_type(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)
