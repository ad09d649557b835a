"""Pad: add (or, with negative pads, remove) borders. https://onnx.ai/onnx/operators/onnx__Pad.html

``pads`` lists the amounts before every padded axis, then after every padded axis:
``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``. By opset:

- 1: attribute ``paddings`` and float attribute ``value``;
- 2: attribute ``pads`` and ``value``;
- 11: inputs ``pads`` and optional ``constant_value`` (scalar, default 0);
- 18: optional ``axes`` input naming the padded axes; 19 adds ``wrap`` mode.

Modes: ``constant``, ``reflect`` (mirror without repeating the edge), ``edge`` (repeat the
edge), ``wrap`` (as if the tensor were a torus). Negative amounts crop before padding.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops._helpers import int_list, normalize_axes
from lite.ops.registry import SMALL_ARRAY_BYTES, kernel

_NUMPY_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(data, pads: list[int], mode: str, value, axes: list[int] | None, allocate=np.empty) -> np.ndarray:
    data = np.asarray(data)
    if mode not in _NUMPY_MODES:
        raise UnsupportedOpError(f"Pad: mode must be one of {sorted(_NUMPY_MODES)}, got {mode!r}")
    axes = list(range(data.ndim)) if axes is None else list(normalize_axes("Pad", axes, data.ndim))
    if len(pads) != 2 * len(axes):
        raise KernelError(f"Pad: expected {2 * len(axes)} pads for axes {axes}, got {len(pads)}")
    before = [0] * data.ndim
    after = [0] * data.ndim
    for index, axis in enumerate(axes):
        before[axis] = pads[index]
        after[axis] = pads[index + len(axes)]

    if min(before) < 0 or min(after) < 0:
        # Crop first for negative amounts, then pad the positive ones.
        window = tuple(
            slice(max(-b, 0), data.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(zip(before, after))
        )
        cropped = data[window]
        widths = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    else:
        cropped, widths = data, list(zip(before, after))
    if not any(b or e for b, e in widths):
        return cropped
    if mode != "constant" and any(
        cropped.shape[axis] == 0 and (b or e) for axis, (b, e) in enumerate(widths)
    ):
        raise KernelError(f"Pad: mode {mode!r} cannot pad an empty axis (shape {cropped.shape})")
    if mode == "constant":
        fill = np.asarray(0 if value is None else value).astype(data.dtype).reshape(-1)
        fill_value = fill[0] if fill.size else data.dtype.type(0)
        if data.dtype.kind in "biufc":
            return _pad_constant(cropped, widths, fill_value, allocate)
        return np.pad(cropped, widths, mode="constant", constant_values=fill_value)
    if _mirrors_fit(cropped.shape, widths, mode):
        return _pad_mirrored(cropped, widths, mode, allocate)
    return np.pad(cropped, widths, mode=_NUMPY_MODES[mode])


def _mirrors_fit(shape: tuple[int, ...], widths: list[tuple[int, int]], mode: str) -> bool:
    """Whether every border is a single copy of cells inside (``reflect``: at most ``n - 1``
    wide, ``wrap``: at most ``n``; ``edge`` always): :func:`_pad_mirrored`'s case. Wider borders
    repeat the reflection or the wrap, which ``np.pad`` does."""
    if mode == "edge":
        return True
    reach = 1 if mode == "reflect" else 0
    return all(b <= n - reach and e <= n - reach for n, (b, e) in zip(shape, widths))


def _pad_mirrored(data: np.ndarray, widths: list[tuple[int, int]], mode: str, allocate) -> np.ndarray:
    """``np.pad`` in ``reflect``, ``edge`` or ``wrap`` mode without its Python layers (42 µs for a
    576-sample window of silero's STFT, most of its call): the data copied in, then each axis's
    borders copied from the cells inside, axis after axis as ``np.pad`` does (an axis's borders
    span the axes padded before it, so the corners come out the same)."""
    shape = tuple(n + b + e for n, (b, e) in zip(data.shape, widths))
    padded = (allocate if math.prod(shape) * data.itemsize >= SMALL_ARRAY_BYTES else np.empty)(shape, data.dtype)
    inner = [slice(b, b + n) for n, (b, _) in zip(data.shape, widths)]
    padded[tuple(inner)] = data
    for axis, (before, after) in enumerate(widths):
        if not (before or after):
            continue
        n = data.shape[axis]
        lead = (slice(None),) * axis
        rest = tuple(inner[axis + 1:])
        if mode == "reflect":
            last = before + n - 2 - after  # the cell before the after border's last source; -1: none
            sources = (slice(2 * before, before, -1), slice(before + n - 2, last if last >= 0 else None, -1))
        elif mode == "edge":
            sources = (slice(before, before + 1), slice(before + n - 1, before + n))
        else:  # wrap
            sources = (slice(n, n + before), slice(before, before + after))
        if before:
            padded[lead + (slice(0, before),) + rest] = padded[lead + (sources[0],) + rest]
        if after:
            padded[lead + (slice(before + n, before + n + after),) + rest] = padded[lead + (sources[1],) + rest]
    return padded


def _pad_constant(data: np.ndarray, widths: list[tuple[int, int]], value, allocate) -> np.ndarray:
    """``np.pad`` of a constant, without its Python layers (most of a small map's call: 70 µs
    for a 32x32 map of 32 channels): the borders set, axis by axis, and the data copied in."""
    shape = tuple(n + b + e for n, (b, e) in zip(data.shape, widths))
    padded = (allocate if math.prod(shape) * data.itemsize >= SMALL_ARRAY_BYTES else np.empty)(shape, data.dtype)
    lead: tuple[slice, ...] = ()
    for axis, (before, after) in enumerate(widths):
        if before:
            padded[lead + (slice(0, before),)] = value
        if after:
            padded[lead + (slice(shape[axis] - after, None),)] = value
        lead += (slice(None),)
    padded[tuple(slice(b, b + n) for n, (b, _) in zip(data.shape, widths))] = data
    return padded


@kernel("Pad", since=11)
def Pad(data, pads, constant_value=None, axes=None, *, mode="constant", allocate=np.empty):
    return _pad(data, int_list(pads), mode, constant_value, int_list(axes), allocate)


@kernel("Pad", since=2)
def Pad_v2(data, *, pads=None, mode="constant", value=0.0):
    if pads is None:
        raise KernelError("Pad: opset-2 Pad needs the 'pads' attribute")
    return _pad(data, list(pads), mode, value, None)


@kernel("Pad", since=1)
def Pad_v1(data, *, paddings=None, mode="constant", value=0.0):
    if paddings is None:
        raise KernelError("Pad: opset-1 Pad needs the 'paddings' attribute")
    return _pad(data, list(paddings), mode, value, None)
