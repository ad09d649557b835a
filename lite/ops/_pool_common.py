"""Window geometry and tap iteration shared by the pooling kernels.

https://onnx.ai/onnx/operators/onnx__MaxPool.html (output shape, pads, ceil_mode).
With ``ceil_mode`` the last window may run past the padded input; the padded input is
extended at the end so every window is in range, and that extension never counts.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops._conv_common import TapPlan, output_shape, resolve_pads, spatial_defaults

# Window taps per channel a pooling node may take (output positions x kernel elements): 2**34, a
# 1024x1024 output under a 128x128 window; real networks stay far below.
_MAX_TAPS = 1 << 34
# Cells a window may reach past the padded input (a ceil-mode or truncated last window): the taps
# there only read fill, and a window far past it is a damaged kernel_shape (transformers'
# EfficientNet reaches 638 past a 2x2 map with its 640x640 window).
_MAX_OVERHANG = 1 << 16


# Hashed by identity: pool_geometry hands out one object per input shape and attributes, and the
# taps and divisors derived from it are remembered per object.
@dataclass(frozen=True, eq=False)
class PoolGeometry:
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    begin: list[int]
    end: list[int]
    # Extra cells past ``end`` so the last (ceil_mode or truncated) window stays in range.
    overhang: list[int]
    out_shape: list[int]
    # Whether count_include_pad counts the overhang too: ONNX Runtime divides a floor-mode window
    # that overhangs (see _truncated_sizes) by the whole kernel, a ceil-mode one by what it covers
    # of the padded input.
    overhang_counts: bool = False

    def tap_plan(self, x: np.ndarray, fill) -> TapPlan:
        """The input laid out so each kernel tap is one contiguous slice (ceil overhang = fill)."""
        end = [e + extra for e, extra in zip(self.end, self.overhang)]
        return TapPlan(x, self.begin, end, self.kernel, self.strides, self.dilations, self.out_shape, fill,
                       offsets=self.live_taps(x.shape[2:]))

    def live_taps(self, spatial: tuple[int, ...]) -> list[list[int]]:
        """Per axis, the kernel indices that reach an input cell from at least one output position.

        The others read only padding or the ceil overhang, so a pool whose fill adds nothing
        (sum, power sum) skips them: a kernel far larger than its input (transformers'
        EfficientNet pools a 2x2 map with a 640x640 ceil-mode window) costs its live taps only.
        Remembered per geometry and shape (finding them loops over every kernel index).
        """
        return _live_taps(self, tuple(spatial))

    def covers_input(self, spatial: tuple[int, ...]) -> bool:
        """Whether the one window there is covers every input cell (a global pool written as a
        window larger than the input: EfficientNet's 640x640 over a 2x2 map)."""
        return all(out == 1 and dilation == 1 and kernel - begin >= size
                   for out, dilation, kernel, begin, size in zip(self.out_shape, self.dilations, self.kernel, self.begin, spatial))

    def tiles(self, spatial: tuple[int, ...]) -> bool:
        """Whether the windows tile the input without padding, overlap or gaps (kernel ==
        stride, no dilation, no pads; DenseNet's 2x2 stride-2 transition pools): each window is
        then a block of a reshaped view (see :func:`tile_view`)."""
        return (not any(self.begin) and not any(self.end) and not any(self.overhang)
                and all(d == 1 for d in self.dilations) and list(self.kernel) == list(self.strides)
                and all(k * o <= n for k, o, n in zip(self.kernel, self.out_shape, spatial)))

    def same_size_3x3(self) -> bool:
        """Whether this is a 3x3 window at stride 1 with one cell of padding each side and no
        dilation (PoolFormer's token mixer): the output has the input's size and the window sum
        is separable (see :func:`same_size_3x3_sum`)."""
        return (list(self.kernel) == [3, 3] and list(self.strides) == [1, 1] and list(self.dilations) == [1, 1]
                and list(self.begin) == [1, 1] and list(self.end) == [1, 1] and not any(self.overhang))

    def divisor(self, spatial: tuple[int, ...], include_pads: bool) -> np.ndarray:
        """How many counted cells each window covers (the AveragePool denominator), read-only;
        remembered per geometry, shape and ``include_pads``."""
        return _divisor(self, tuple(spatial), bool(include_pads))

    def _live_taps(self, spatial: tuple[int, ...]) -> list[list[int]]:
        live = []
        for axis, size in enumerate(spatial):
            stride, dilation, begin = self.strides[axis], self.dilations[axis], self.begin[axis]
            last = (self.out_shape[axis] - 1) * stride
            # Tap k reads input cells o*s + k*d - b for o*s in [0, last]: some of them in [0, size).
            live.append([k for k in range(self.kernel[axis]) if _hits(k * dilation - begin, stride, last, size)])
        return live

    def _divisor(self, spatial: tuple[int, ...], include_pads: bool) -> np.ndarray:
        per_axis = []
        for axis, size in enumerate(spatial):
            b, e, extra = self.begin[axis], self.end[axis], self.overhang[axis]
            mask = np.zeros(b + size + e + extra)
            if include_pads:
                mask[: b + size + e + (extra if self.overhang_counts else 0)] = 1
            else:
                mask[b : b + size] = 1
            count = np.zeros(self.out_shape[axis])
            for k in range(self.kernel[axis]):
                start = k * self.dilations[axis]
                stop = start + (self.out_shape[axis] - 1) * self.strides[axis] + 1
                count += mask[start : stop : self.strides[axis]]
            per_axis.append(count)
        total = per_axis[0]
        for count in per_axis[1:]:
            total = np.multiply.outer(total, count)
        total.flags.writeable = False
        return total


@functools.lru_cache(maxsize=256)
def _live_taps(geometry: PoolGeometry, spatial: tuple[int, ...]) -> list[list[int]]:
    return geometry._live_taps(spatial)


@functools.lru_cache(maxsize=256)
def _divisor(geometry: PoolGeometry, spatial: tuple[int, ...], include_pads: bool) -> np.ndarray:
    return geometry._divisor(spatial, include_pads)


def _hits(shift: int, stride: int, last: int, size: int) -> bool:
    """Whether some ``t`` in ``range(0, last + 1, stride)`` puts ``t + shift`` in ``[0, size)``."""
    first = max(0, -(-(-shift) // stride) * stride)  # the smallest multiple of stride >= -shift
    return first <= last and first + shift < size


def pool_geometry(
    op: str,
    x: np.ndarray,
    *,
    kernel_shape,
    strides,
    dilations,
    auto_pad: str,
    pads,
    ceil_mode: int,
) -> PoolGeometry:
    """The window geometry of a pool over ``x``: one object per input shape and attributes
    (remembered: finding a large window's live taps and divisor loops over its every index)."""
    if x.ndim < 3:
        raise UnsupportedOpError(f"{op}: input must be (N, C, spatial...), got shape {x.shape}")
    try:
        key = (op, x.shape[2:], _hashable(kernel_shape), _hashable(strides), _hashable(dilations), auto_pad,
               _hashable(pads), ceil_mode)
        return _remembered_geometry(key)
    except TypeError:  # attributes that cannot be a key (a damaged model): work it out, and fail, as given
        return _pool_geometry(op, x.shape[2:], kernel_shape, strides, dilations, auto_pad, pads, ceil_mode)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value


@functools.lru_cache(maxsize=512)
def _remembered_geometry(key) -> PoolGeometry:
    return _pool_geometry(*key)


def _pool_geometry(op, spatial, kernel_shape, strides, dilations, auto_pad, pads, ceil_mode) -> PoolGeometry:
    kernel, strides, dilations = spatial_defaults(op, spatial, kernel_shape, strides, dilations)
    begin, end = resolve_pads(op, auto_pad, pads, spatial, kernel, strides, dilations)
    out = output_shape(spatial, kernel, strides, dilations, begin, end, ceil_mode)
    if not ceil_mode:
        out = _truncated_sizes(op, spatial, kernel, strides, dilations, begin, end, out)
    taps = math.prod(out) * math.prod(kernel)
    if taps > _MAX_TAPS:
        # Spec-valid with auto_pad SAME (the pads grow with the kernel), but the loop over the
        # window would run for hours: a kernel_shape such as [2**40, 2**31 - 1] is no pooling window.
        raise KernelError(
            f"{op}: kernel {list(kernel)} over an output of {list(out)} takes {taps:,} taps per channel, "
            f"more than {_MAX_TAPS:,}; check the node's kernel_shape"
        )
    overhang = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e))
        for o, s, k, d, n, b, e in zip(out, strides, kernel, dilations, spatial, begin, end)
    ]
    if max(overhang, default=0) > _MAX_OVERHANG:
        raise KernelError(f"{op}: kernel {list(kernel)} (dilations {list(dilations)}) reaches {max(overhang):,} cells "
                          f"past the input {list(spatial)} padded by {list(begin)} and {list(end)}; check the node's "
                          "kernel_shape")
    return PoolGeometry(kernel, strides, dilations, begin, end, overhang, out, overhang_counts=not ceil_mode)


def _truncated_sizes(op, spatial, kernel, strides, dilations, begin, end, out) -> list[int]:
    """Output sizes as ONNX Runtime computes them, ``(span / stride) + 1`` in C's division, which
    rounds toward zero: a window that overhangs the padded input by less than a stride still makes
    one output cell, over the part of the window inside, as a ceil-mode overhang does (the spec's
    floor, which onnx.reference follows, gives none; a 2x2 map under a 3x3 stride-2 max pool
    gives one cell in ONNX Runtime). A window that overhangs by more is an error there too."""
    sizes = []
    for o, n, k, s, d, b, e in zip(out, spatial, kernel, strides, dilations, begin, end):
        span = n + b + e - ((k - 1) * d + 1)
        if span >= 0:
            sizes.append(o)
            continue
        length = -(-span // s) + 1
        if length < 0:
            raise KernelError(f"{op}: kernel {list(kernel)} (dilations {list(dilations)}) is larger than the input "
                              f"{list(spatial)} padded by {list(begin)} and {list(end)}")
        sizes.append(length)
    return sizes


def lowest(dtype: np.dtype):
    """The value padding must hold so it never wins a max."""
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def tile_sum(x: np.ndarray, geometry: PoolGeometry) -> np.ndarray:
    """The sum of each window, for windows that tile the input (:meth:`PoolGeometry.tiles`):
    per spatial axis, the sum of its ``k`` taps, each every ``k``-th slice along that axis (a
    2x2 pool of a 16x16 map is two adds over strided views; one reduction over the window axes
    of a reshaped view took ten times as long)."""
    total, owned = x, False
    for axis, (k, o) in enumerate(zip(geometry.kernel, geometry.out_shape)):
        lead = (slice(None),) * (2 + axis)
        taps = [total[lead + (slice(t, t + k * o, k),)] for t in range(k)]
        if k == 1:
            total = taps[0]
            continue
        total = np.add(taps[0], taps[1])
        for tap in taps[2:]:
            total += tap
        owned = True
    return total if owned else np.array(total)  # a new array: the caller divides it in place


def same_size_3x3_sum(x: np.ndarray) -> np.ndarray:
    """The sum of each 3x3 window of a (N, C, H, W) ``x`` padded by one zero cell each side, as
    a new array of ``x``'s shape: three shifted columns, then three shifted rows of the sums, of
    a zero-padded copy (five numpy calls; the tap plan's general path cost about 160 µs a call
    whatever the size, a fifth of PoolFormer's run on 64x64 images)."""
    height, width = x.shape[2:]
    padded = np.zeros((*x.shape[:2], height + 2, width + 2), x.dtype)
    padded[:, :, 1:-1, 1:-1] = x
    rows = np.add(padded[:, :, :, :-2], padded[:, :, :, 1:-1])
    rows += padded[:, :, :, 2:]
    total = np.add(rows[:, :, :-2], rows[:, :, 1:-1])
    total += rows[:, :, 2:]
    return total
