"""Padding: Pad, MirrorPad, PadV3 (MindSpore operator docs; ``nn.Pad``, ``nn.ZeroPad2d`` and the
other ``nn.*Pad*d`` cells, ``ops.pad``).

* ``Pad(x)`` with ``paddings = ((before, after), ...)``, one pair per axis: zeros
  (``nn.Pad(mode="CONSTANT")``);
* ``MirrorPad(x, paddings)`` with ``paddings`` an (rank, 2) array and ``mode`` 'REFLECT' (mirror
  without repeating the edge, ONNX ``reflect``) or 'SYMMETRIC' (mirror repeating the edge);
* ``PadV3(x, padding, value)`` with ``mode`` 'constant' (``value``, default 0), 'reflect',
  'edge' or 'circular' (wrap around); ``padding`` starts at the LAST axis, as in
  ``torch.nn.functional.pad``: ``(last_before, last_after, second_last_before, ...)`` when
  ``paddings_contiguous`` is true, ``(last_before, second_last_before, ..., last_after, ...)``
  when false. Negative amounts crop (constant mode).

ONNX Pad (opset 17) takes ``[begins..., ends...]`` and the modes constant, reflect and edge;
'SYMMETRIC' and 'circular' are written out per axis as a Concat of reversed or wrapped Slices.
"""

from __future__ import annotations

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import TensorValue, TranslationError, Value
from converter.mindspore.primitives._common import int_tuple

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
PADV3_MODES = ("constant", "reflect", "edge", "circular")

Pairs = list[tuple[int, int]]


def _ints(call: PrimitiveCall, values, suffix: str) -> TensorValue:
    return call.initializer(np.asarray(values, dtype=np.int64), suffix)


def _pairs(value, what: str) -> Pairs:
    """((before, after), ...) per axis, from nested tuples or an (n, 2) array."""
    array = np.asarray(value)
    if array.ndim != 2 or array.shape[1] != 2 or array.dtype.kind not in "iu":
        raise TranslationError(f"{what} {value!r} is not a list of (before, after) pairs of ints")
    return [(int(before), int(after)) for before, after in array]


def _onnx_pad(call: PrimitiveCall, x: TensorValue, pairs: Pairs, mode: str, value: TensorValue | None = None):
    pads = [before for before, _ in pairs] + [after for _, after in pairs]
    inputs = [x, _ints(call, pads, "pads")] + ([value] if value is not None else [])
    return call.emit("Pad", inputs, mode=mode)


def _slice(call: PrimitiveCall, x: TensorValue, axis: int, start: int, end: int, step: int) -> TensorValue:
    inputs = [x, _ints(call, [start], "starts"), _ints(call, [end], "ends"), _ints(call, [axis], "axes")]
    return call.step("Slice", [*inputs, _ints(call, [step], "steps")], like=x)


def _pad_by_slices(call: PrimitiveCall, x: TensorValue, pairs: Pairs, mode: str) -> Value:
    """'symmetric': the borders are the first/last cells reversed; 'circular': the last cells
    go before, the first cells after. One Concat per padded axis."""
    if any(before < 0 or after < 0 for before, after in pairs):
        raise TranslationError(f"negative paddings {pairs} are not translated in {mode!r} mode")
    padded = [axis for axis, pair in enumerate(pairs) if any(pair)]
    if not padded:
        return call.emit("Identity", [x])
    for axis in padded[:-1]:
        x = call.step("Concat", _bordered(call, x, axis, pairs[axis], mode), like=x, axis=axis)
    last = padded[-1]
    return call.emit("Concat", _bordered(call, x, last, pairs[last], mode), axis=last)


def _bordered(call: PrimitiveCall, x: TensorValue, axis: int, pair: tuple[int, int], mode: str) -> list[TensorValue]:
    before, after = pair
    parts = [x]
    if before:
        parts.insert(0, _head(call, x, axis, before, mode))
    if after:
        parts.append(_tail(call, x, axis, after, mode))
    return parts


def _head(call: PrimitiveCall, x: TensorValue, axis: int, count: int, mode: str) -> TensorValue:
    if mode == "symmetric":  # cells count-1 .. 0
        return _slice(call, x, axis, count - 1, INT64_MIN, -1)
    return _slice(call, x, axis, -count, INT64_MAX, 1)  # circular: the last count cells


def _tail(call: PrimitiveCall, x: TensorValue, axis: int, count: int, mode: str) -> TensorValue:
    if mode == "symmetric":  # cells -1 .. -count
        return _slice(call, x, axis, -1, -count - 1, -1)
    return _slice(call, x, axis, 0, count, 1)  # circular: the first count cells


def pad(call: PrimitiveCall) -> Value:
    pairs = _pairs(call.arg(1, "paddings"), "paddings")
    return _onnx_pad(call, call.tensor(0), pairs, "constant")


def mirror_pad(call: PrimitiveCall) -> Value:
    pairs = _pairs(call.arg(1, "paddings"), "paddings")
    mode = str(call.arg(None, "mode", default="REFLECT")).upper()
    if mode == "REFLECT":
        return _onnx_pad(call, call.tensor(0), pairs, "reflect")
    if mode == "SYMMETRIC":
        return _pad_by_slices(call, call.tensor(0), pairs, "symmetric")
    raise TranslationError(f"mode {mode!r} is not 'REFLECT' or 'SYMMETRIC'")


def _padv3_pairs(call: PrimitiveCall, rank: int) -> Pairs:
    """Per-axis pairs from PadV3's last-axis-first list (see the module docstring)."""
    amounts = int_tuple(call.arg(1, "paddings", "padding"), "padding")
    contiguous = bool(call.arg(None, "paddings_contiguous", default=True))
    count = len(amounts) // 2
    if len(amounts) % 2 or count > rank:
        raise TranslationError(f"padding {amounts} is not (before, after) pairs for at most {rank} axes")
    if contiguous:
        from_last = [(amounts[2 * i], amounts[2 * i + 1]) for i in range(count)]
    else:
        from_last = [(amounts[i], amounts[count + i]) for i in range(count)]
    return [(0, 0)] * (rank - count) + from_last[::-1]


def pad_v3(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    if x.rank is None:
        raise TranslationError("the rank of input 0 is unknown (no 'shape' attribute)")
    pairs = _padv3_pairs(call, x.rank)
    mode = str(call.arg(None, "mode", default="constant")).lower()
    if mode not in PADV3_MODES:
        raise TranslationError(f"mode {mode!r} is not one of {', '.join(PADV3_MODES)}")
    if mode == "circular":
        return _pad_by_slices(call, x, pairs, "circular")
    value = None
    if mode == "constant" and len(call.inputs) > 2:
        fill = call.arg(2, "constant_value", default=None)
        if fill is not None:
            value = call.initializer(np.asarray(fill, dtype=x.dtype or np.float32).reshape(()), "value")
    return _onnx_pad(call, x, pairs, mode, value)


TABLE = {
    "Pad": pad,
    "MirrorPad": mirror_pad,
    "PadV3": pad_v3,
}
