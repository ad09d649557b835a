"""The string operators: StringConcat, StringSplit, RegexFullMatch and StringNormalizer.

https://onnx.ai/onnx/operators/onnx__StringConcat.html
https://onnx.ai/onnx/operators/onnx__StringSplit.html
https://onnx.ai/onnx/operators/onnx__RegexFullMatch.html
https://onnx.ai/onnx/operators/onnx__StringNormalizer.html

String tensors are object arrays whose elements may be ``str`` or UTF-8 ``bytes``; results
hold ``str``.
"""

from __future__ import annotations

import re

import numpy as np

from lite.errors import InputValueError, KernelError
from lite.ops.registry import kernel


def as_text(values, input_name: str | None) -> np.ndarray:
    """An object array of ``str`` (bytes decoded as UTF-8).

    ``input_name``: the kernel input the values come from. Its bytes came from the caller (a
    BYTES tensor sent to a string model), so bytes that are not UTF-8 raise
    :class:`InputValueError` naming the input and the element, not a UnicodeDecodeError that
    reads as the model failing. None: the model's own strings (attributes), decoded as
    :func:`lite.format.values.attribute_value` decodes them, keeping undecodable bytes as
    surrogates."""
    array = np.asarray(values, dtype=object)
    text = np.empty(array.shape, dtype=object)
    for index, value in np.ndenumerate(array):
        text[index] = _decoded(value, input_name, index) if isinstance(value, bytes) else str(value)
    return text


def _decoded(value: bytes, input_name: str | None, index: tuple[int, ...]) -> str:
    if input_name is None:
        return value.decode("utf-8", errors="surrogateescape")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputValueError(
            f"input {input_name} element {list(index)} is not UTF-8 text ({err.reason} at byte {err.start} of "
            f"{value[:32]!r}); send strings encoded as UTF-8"
        ) from err


@kernel("StringConcat", since=20)
def StringConcat(X, Y):
    """Elementwise ``X + Y`` with numpy broadcasting."""
    # np.add on 0-d object arrays yields a bare str: keep it an array.
    return np.asarray(np.add(as_text(X, "X"), as_text(Y, "Y")), dtype=object)


@kernel("StringSplit", since=20)
def StringSplit(X, *, delimiter=None, maxsplit=None):
    """Substrings padded with "" to the longest split (Y), and their counts as int64 (Z).

    Without a delimiter (or with ""), runs of whitespace separate and edges are trimmed;
    otherwise every delimiter separates, so consecutive ones yield empty strings.
    """
    text = as_text(X, "X")
    separator = delimiter or None
    limit = -1 if maxsplit is None else maxsplit
    pieces = [value.split(separator, limit) for value in text.reshape(-1)]
    width = max((len(parts) for parts in pieces), default=0)
    substrings = np.full((len(pieces), width), "", dtype=object)
    for row, parts in enumerate(pieces):
        substrings[row, : len(parts)] = parts
    counts = np.array([len(parts) for parts in pieces], dtype=np.int64).reshape(text.shape)
    return substrings.reshape(text.shape + (width,)), counts


@kernel("RegexFullMatch", since=20)
def RegexFullMatch(X, *, pattern):
    """Whether each string matches ``pattern`` entirely (RE2 syntax, run with Python's ``re``)."""
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise KernelError(f"RegexFullMatch: invalid pattern {pattern!r}: {err}") from err
    text = as_text(X, "X")
    matches = np.zeros(text.shape, dtype=bool)
    for index, value in np.ndenumerate(text):
        matches[index] = compiled.fullmatch(value) is not None
    return matches


@kernel("StringNormalizer", since=10)
def StringNormalizer(X, *, case_change_action="NONE", is_case_sensitive=0, locale=None, stopwords=None):
    """Drop ``stopwords``, then change case; X is ``[C]`` or ``[1, C]``.

    When every string is dropped the result is one empty string, shaped ``[1]`` or ``[1, 1]``.
    Case changes follow Unicode rules regardless of ``locale``.
    """
    text = as_text(X, "X")
    if text.ndim not in (1, 2) or (text.ndim == 2 and text.shape[0] != 1):
        raise KernelError(f"StringNormalizer: X must be [C] or [1, C], got shape {text.shape}")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise KernelError(
            f"StringNormalizer: case_change_action must be NONE, LOWER or UPPER, got {case_change_action!r}"
        )
    words = list(text.reshape(-1))
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            words = [word for word in words if word not in stop]
        else:
            stop = {word.casefold() for word in stopwords}
            words = [word for word in words if word.casefold() not in stop]
    if case_change_action == "LOWER":
        words = [word.lower() for word in words]
    elif case_change_action == "UPPER":
        words = [word.upper() for word in words]
    if not words:
        words = [""]
    result = np.array(words, dtype=object)
    return result.reshape(1, -1) if text.ndim == 2 else result
