"""LabelEncoder (ai.onnx.ml): map each element through a key -> value table, with a default.

https://onnx.ai/onnx/operators/onnx_aionnxml_LabelEncoder.html

Keys come from one of ``keys_strings``/``keys_int64s``/``keys_floats``/``keys_tensor`` and
values from the parallel ``values_*``; the output type is the values' type. Unknown elements
take ``default_tensor`` (opset 4), else the ``default_*`` of the values' type. A repeated key
keeps its last value; a NaN key matches every NaN. Opset 1 maps strings to their index in
``classes_strings`` and integers back to those strings.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel
from lite.ops.string_ops import as_text


def _one_of(kind: str, candidates: dict) -> tuple[str, np.ndarray]:
    given = [(name, value) for name, value in candidates.items() if value is not None]
    if len(given) != 1:
        raise KernelError(f"LabelEncoder: exactly one {kind} attribute must be set, got {[n for n, _ in given]}")
    name, value = given[0]
    if name.endswith("strings"):
        return name, np.array([str(v) for v in value], dtype=object)
    if name.endswith("int64s"):
        return name, np.asarray(value, dtype=np.int64)
    if name.endswith("floats"):
        return name, np.asarray(value, dtype=np.float32)
    array = np.asarray(value)
    return name, as_text(array, None) if array.dtype.kind in "OSU" else array


def _lookup_key(value):
    """A hashable key; every NaN maps to the same key."""
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return "nan"
    return value.item() if isinstance(value, np.generic) else value


def _encode(X, keys: np.ndarray, values: np.ndarray, default) -> np.ndarray:
    if keys.shape[0] != values.shape[0]:
        raise KernelError(f"LabelEncoder: {keys.shape[0]} keys but {values.shape[0]} values")
    table = {_lookup_key(key): value for key, value in zip(keys.reshape(-1), values.reshape(-1))}
    data = as_text(X, "X") if keys.dtype == object else np.asarray(X)
    output = np.empty(data.shape, dtype=values.dtype)
    for index, element in np.ndenumerate(data):
        output[index] = table.get(_lookup_key(element), default)
    return output


@kernel("LabelEncoder", since=4, domain="ai.onnx.ml")
def LabelEncoder(X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", default_tensor=None,
                 keys_floats=None, keys_int64s=None, keys_strings=None, keys_tensor=None,
                 values_floats=None, values_int64s=None, values_strings=None, values_tensor=None):
    _, keys = _one_of("keys_*", {"keys_floats": keys_floats, "keys_int64s": keys_int64s,
                                 "keys_strings": keys_strings, "keys_tensor": keys_tensor})
    _, values = _one_of("values_*", {"values_floats": values_floats, "values_int64s": values_int64s,
                                     "values_strings": values_strings, "values_tensor": values_tensor})
    if default_tensor is not None:
        default = (as_text(default_tensor, None) if values.dtype == object else np.asarray(default_tensor)).reshape(-1)[0]
    elif values.dtype == object:
        default = default_string
    elif values.dtype.kind == "f":
        default = default_float
    else:
        default = default_int64
    return _encode(X, keys, values, default)


@kernel("LabelEncoder", since=2, domain="ai.onnx.ml")
def LabelEncoder_2(X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", keys_floats=None,
                   keys_int64s=None, keys_strings=None, values_floats=None, values_int64s=None,
                   values_strings=None):
    return LabelEncoder(X, default_float=default_float, default_int64=default_int64,
                        default_string=default_string, keys_floats=keys_floats, keys_int64s=keys_int64s,
                        keys_strings=keys_strings, values_floats=values_floats, values_int64s=values_int64s,
                        values_strings=values_strings)


@kernel("LabelEncoder", since=1, domain="ai.onnx.ml")
def LabelEncoder_1(X, *, classes_strings=None, default_int64=-1, default_string="_Unused"):
    classes = np.array([str(c) for c in classes_strings or []], dtype=object)
    indices = np.arange(classes.shape[0], dtype=np.int64)
    if np.asarray(X).dtype == object:
        return _encode(X, classes, indices, default_int64)
    return _encode(np.asarray(X).astype(np.int64), indices, classes, default_string)
