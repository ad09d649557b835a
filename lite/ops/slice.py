"""Slice: take a strided window of a tensor. https://onnx.ai/onnx/operators/onnx__Slice.html

Opset 1 reads ``starts``/``ends``/``axes`` from attributes (step 1); opset 10 on reads them,
and ``steps``, from inputs. Negative starts and ends count from the end of the axis; then, as
the spec says, they are clamped to ``[0, dim]`` for positive steps and ``[-1, dim - 1]`` for
negative ones, so out-of-range values (INT64_MAX, INT64_MIN) are fine.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import ReadOnlyInputs, int_list, normalize_axes
from lite.ops.registry import kernel


def _window(start: int, end: int, step: int, dimension: int) -> slice:
    if start < 0:
        start += dimension
    if end < 0:
        end += dimension
    if step > 0:
        start = min(max(start, 0), dimension)
        end = min(max(end, 0), dimension)
    else:
        start = min(max(start, 0), dimension - 1)
        end = min(max(end, -1), dimension - 1)
    # A Python slice reads a negative end as "from the back"; -1 here means "past the front".
    return slice(start, end if end >= 0 else None, step)


# Windows worked out from constant starts, ends, axes and steps, per data shape.
_WINDOWS = ReadOnlyInputs()


def _slice(data, starts, ends, axes, steps) -> np.ndarray:
    data = np.asarray(data)
    inputs = (starts, ends, axes, steps)
    key = _WINDOWS.key(data.shape, inputs)
    if key is not None:
        windows = _WINDOWS.get(key, inputs)
        if windows is None:
            windows = _windows(data, starts, ends, axes, steps)
            _WINDOWS.put(key, inputs, windows)
        return data[windows]
    return data[_windows(data, starts, ends, axes, steps)]


def _windows(data: np.ndarray, starts, ends, axes, steps) -> tuple[slice, ...]:
    starts = int_list(starts)
    ends = int_list(ends)
    if len(starts) != len(ends):
        raise KernelError(f"Slice: {len(starts)} starts but {len(ends)} ends")
    axes = list(range(len(starts))) if axes is None else int_list(axes)
    steps = [1] * len(starts) if steps is None else int_list(steps)
    if not len(axes) == len(steps) == len(starts):
        raise KernelError(
            f"Slice: starts, ends, axes and steps differ in length ({starts}, {ends}, {axes}, {steps})"
        )
    if 0 in steps:
        raise KernelError(f"Slice: steps must be non-zero, got {steps}")
    windows = [slice(None)] * data.ndim
    for axis, start, end, step in zip(normalize_axes("Slice", axes, data.ndim), starts, ends, steps):
        windows[axis] = _window(start, end, step, data.shape[axis])
    return tuple(windows)


@kernel("Slice", since=10)
def Slice(data, starts, ends, axes=None, steps=None):
    return _slice(data, starts, ends, axes, steps)


@kernel("Slice", since=1)
def Slice_v1(data, *, starts=None, ends=None, axes=None):
    if starts is None or ends is None:
        raise KernelError("Slice: opset-1 Slice needs the 'starts' and 'ends' attributes")
    return _slice(data, starts, ends, axes, None)
