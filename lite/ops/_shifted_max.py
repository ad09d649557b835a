"""MaxPool of float images (N, C, H, W) by shifts of whole flat buffers, the input unpadded.

The maximum over a box is separable: the max over the window's rows, then over its columns.
On the flat, C-contiguous input each row tap of every window is one shift of the whole buffer,
``rows[k] = max_i flat[k + (i*d_h - b_h)*W]``, and each column tap one shift of that,
``both[k] = max_j rows[k + j*d_w - b_w]``: one contiguous, vectorised ``np.maximum`` per tap
over everything, the window of output (o_h, o_w) then at row ``o_h*s_h``, column ``o_w*s_w`` of
its plane, copied out. Views of the output's rows alone ran numpy's inner loop once per row (16
to 34 cells on a 64x64 model), and even a loop per plane ran at half the speed of one flat loop:
more than the cells computed for nothing cost at strides 1 and 2.

Nothing is padded. A window reaching past its plane's first or last row reads the neighbouring
plane there, one reaching past its row's first or last column the neighbouring row: those
output rows and columns are worked out again from their taps inside (a few rows and columns;
copying the image into a padded buffer was a copy per row, 2048 of them and 27 of the 100 µs of
ResNeXt's 3x3 stride-2 pool of a 32x32 map of 64 channels). The padding then never wins a max,
as MaxPool's padding must not; a ``fill`` value makes it count instead (a constant Pad folded
into the pool), the ceil-mode overhang past the pads never counting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from lite.ops._pool_common import lowest


@dataclass(frozen=True)
class _Border:
    """An output row or column whose window reaches past the input: where it sits in the flat
    buffer (a slice), its taps inside (slices of the source), and whether one is in the padding
    proper (not the ceil overhang)."""

    target: slice | tuple[slice, ...]
    inside: tuple[slice | tuple[slice, ...], ...]
    padding: bool


@dataclass(frozen=True)
class _Plan:
    """The slices one input shape and geometry takes, worked out once (a 64x64 model's pool is
    a few microseconds of numpy; building its slices each call cost as much)."""

    size: int
    row_taps: tuple[slice, ...]
    rows_out: slice
    border_rows: tuple[_Border, ...]  # over (planes, H, W) views
    column_taps: tuple[slice, ...]
    columns_out: slice
    border_columns: tuple[_Border, ...]  # over the flat buffers
    # The output's cells in the (N, C, H, W) window maxima; None where they are all of them.
    corners: tuple[slice, ...] | None


def shifted_max_2d(x: np.ndarray, geometry, allocate=np.empty, fill=None) -> np.ndarray | None:
    """The max pool of a non-empty float (N, C, H, W) ``x`` over ``geometry``'s windows, padding
    never winning, or, with ``fill``, padding cells holding ``fill`` (see the module docstring).
    None where the windows do not suit the shifts (negative pads, a window starting past its
    plane or row); the caller then takes another path."""
    plan = _plan(geometry, x.shape)
    if plan is None:
        return None
    x = np.ascontiguousarray(x)
    flat = x.reshape(-1)
    # The row maxima and the window maxima in one request (the engine's arena takes a few µs
    # a request); a stride-1 pool whose output has the input's size (GoogLeNet's 3x3 pools
    # padded by 1) computes its window maxima in the output itself, every one an output cell.
    scratch = allocate((1 if plan.corners is None else 2, plan.size), x.dtype)
    rows = scratch[0]
    _max_of_taps([flat[taps] for taps in plan.row_taps], rows[plan.rows_out])
    if plan.border_rows:
        planes = (x.shape[0] * x.shape[1], *x.shape[2:])
        source, target = x.reshape(planes), rows.reshape(planes)
        # Short rows: each (planes, W) row view transposed, so numpy's inner loop runs across
        # the planes, once per column (GoogLeNet's 4x4 maps of 240 channels: 4 loops of 240
        # cells instead of 240 of 4, half the time).
        across = x.shape[3] < planes[0]
        for border in plan.border_rows:
            _max_of_border([source[tap].T if across else source[tap] for tap in border.inside],
                           target[border.target].T if across else target[border.target], border.padding, fill)
    y = allocate((*x.shape[:2], *geometry.out_shape), x.dtype)
    both = y.reshape(-1) if plan.corners is None else scratch[1]
    _max_of_taps([rows[taps] for taps in plan.column_taps], both[plan.columns_out])
    for border in plan.border_columns:
        _max_of_border([rows[tap] for tap in border.inside], both[border.target], border.padding, fill)
    if plan.corners is not None:
        np.copyto(y, both.reshape(x.shape)[plan.corners])
    return y


def _max_of_taps(taps, out) -> None:
    """``out`` = the max of ``taps``, iterated in the order of their axes (C order: a caller's
    transposed views choose numpy's inner loop)."""
    if len(taps) == 1:
        np.copyto(out, taps[0])
        return
    np.maximum(taps[0], taps[1], out=out, order="C")
    for tap in taps[2:]:
        np.maximum(out, tap, out=out, order="C")


def _max_of_border(inside, target, padding: bool, fill) -> None:
    if inside:
        _max_of_taps(inside, target)
        if padding and fill is not None:
            np.maximum(target, fill, out=target, order="C")
    else:
        target[...] = fill if padding and fill is not None else lowest(target.dtype)


@functools.lru_cache(maxsize=256)
def _plan(geometry, shape: tuple[int, ...]) -> _Plan | None:
    height, width = shape[2:]
    (stride_h, stride_w), (out_h, out_w) = geometry.strides, geometry.out_shape
    if ((out_h - 1) * stride_h >= height or (out_w - 1) * stride_w >= width
            or min(geometry.begin) < 0 or min(geometry.end) < 0):
        return None
    size = shape[0] * shape[1] * height * width
    row_taps, rows_out = _shifts(size, geometry.kernel[0], geometry.dilations[0] * width, geometry.begin[0] * width)
    column_taps, columns_out = _shifts(size, geometry.kernel[1], geometry.dilations[1], geometry.begin[1])
    border_rows = tuple(
        _Border((slice(None), row), tuple((slice(None), tap) for tap in inside), padding)
        for row, inside, padding in _border_taps(geometry, 0, height))
    border_columns = tuple(
        _Border(slice(column, None, width), tuple(slice(tap, None, width) for tap in inside), padding)
        for column, inside, padding in _border_taps(geometry, 1, width))
    corners = None
    if (out_h, out_w, stride_h, stride_w) != (height, width, 1, 1):
        corners = (slice(None), slice(None), slice(0, (out_h - 1) * stride_h + 1, stride_h),
                   slice(0, (out_w - 1) * stride_w + 1, stride_w))
    return _Plan(size, row_taps, rows_out, border_rows, column_taps, columns_out, border_columns, corners)


def _shifts(size: int, taps: int, step: int, shift: int) -> tuple[tuple[slice, ...], slice]:
    """The source slices and the target slice of ``target[k] = max_t source[k + t*step - shift]``
    for every ``k`` whose taps are all inside a flat buffer of ``size``."""
    stop = max(min(size, size - (taps - 1) * step + shift), shift)
    return tuple(slice(t * step, t * step + stop - shift) for t in range(taps)), slice(shift, stop)


def _border_taps(geometry, axis: int, size: int) -> list[tuple[int, list[int], bool]]:
    """(the window's place along ``axis``, its taps inside, whether one is in the padding proper)
    for each output position whose window reaches past the input along ``axis``."""
    kernel, stride, dilation = geometry.kernel[axis], geometry.strides[axis], geometry.dilations[axis]
    begin, end = geometry.begin[axis], geometry.end[axis]
    border = []
    for position in range(geometry.out_shape[axis]):
        taps = [position * stride - begin + j * dilation for j in range(kernel)]
        if taps[0] < 0 or taps[-1] >= size:
            inside = [tap for tap in taps if 0 <= tap < size]
            padding = any(-begin <= tap < 0 or size <= tap < size + end for tap in taps)
            border.append((position * stride, inside, padding))
    return border
