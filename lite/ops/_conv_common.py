"""Helpers shared by the convolution and pooling kernels: attribute defaults, padding, windows.

Padding follows the ONNX Conv/Pool specs (https://onnx.ai/onnx/operators/onnx__Conv.html):
``pads`` is ``[x1_begin, x2_begin, ..., x1_end, x2_end]``; ``auto_pad`` SAME_* makes the
output ``ceil(input / stride)`` long and puts the odd pixel at the end (SAME_UPPER) or at the
beginning (SAME_LOWER).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from lite.errors import UnsupportedOpError


def spatial_defaults(
    op: str,
    spatial_shape: Sequence[int],
    kernel_shape: Sequence[int] | None,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
) -> tuple[list[int], list[int], list[int]]:
    """Kernel shape, strides and dilations with the spec's defaults filled in."""
    rank = len(spatial_shape)
    if kernel_shape is None:
        raise UnsupportedOpError(f"{op}: the kernel_shape attribute is required")
    kernel = [int(k) for k in kernel_shape]
    strides = [1] * rank if not strides else [int(s) for s in strides]
    dilations = [1] * rank if not dilations else [int(d) for d in dilations]
    if not len(kernel) == len(strides) == len(dilations) == rank:
        raise UnsupportedOpError(
            f"{op}: kernel_shape {kernel}, strides {strides} and dilations {dilations} must all have "
            f"{rank} entries (one per spatial axis of the input)"
        )
    return kernel, strides, dilations


def resolve_pads(
    op: str,
    auto_pad: str,
    pads: Sequence[int] | None,
    spatial_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[list[int], list[int]]:
    """(begin pads, end pads) for each spatial axis, per ``auto_pad``."""
    rank = len(spatial_shape)
    if auto_pad in ("NOTSET", ""):
        pads = [0] * (2 * rank) if not pads else [int(p) for p in pads]
        if len(pads) != 2 * rank:
            raise UnsupportedOpError(f"{op}: pads must have {2 * rank} entries, got {len(pads)}")
        return pads[:rank], pads[rank:]
    if auto_pad == "VALID":
        return [0] * rank, [0] * rank
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedOpError(
            f"{op}: auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}"
        )
    begin, end = [], []
    for size, k, s, d in zip(spatial_shape, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(small)
            end.append(large)
        else:
            begin.append(large)
            end.append(small)
    return begin, end


def output_shape(
    spatial_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    ceil_mode: int = 0,
) -> list[int]:
    """Spatial output shape; with ``ceil_mode`` the last window must start inside the input."""
    out = []
    for size, k, s, d, b, e in zip(spatial_shape, kernel, strides, dilations, begin, end):
        span = size + b + e - ((k - 1) * d + 1)
        if ceil_mode:
            length = math.ceil(span / s) + 1
            if (length - 1) * s >= size + b:
                length -= 1
        else:
            length = span // s + 1
        out.append(max(length, 0))
    return out


def pad_input(
    x: np.ndarray,
    begin: Sequence[int],
    end: Sequence[int],
    value: float = 0.0,
    allocate: Callable[..., np.ndarray] = np.empty,
) -> np.ndarray:
    """``x`` with its spatial axes padded by ``value``; negative pads crop. Returns ``x`` itself when
    there is nothing to pad (no copy). The padded copy comes from ``allocate`` (see the kernel
    contract in :mod:`lite.ops.registry`); only its border is filled, then the input copied in."""
    if not any(begin) and not any(end):
        return x
    lead = x.ndim - len(begin)
    crop = [slice(None)] * lead
    grow_begin, grow_end = [], []
    for b, e, size in zip(begin, end, x.shape[lead:]):
        crop.append(slice(max(-b, 0), size - max(-e, 0)))
        grow_begin.append(max(b, 0))
        grow_end.append(max(e, 0))
    x = x[tuple(crop)]
    shape = list(x.shape[:lead]) + [
        n + b + e for n, b, e in zip(x.shape[lead:], grow_begin, grow_end)
    ]
    padded = allocate(tuple(shape), x.dtype)
    for axis, (b, e) in enumerate(zip(grow_begin, grow_end)):
        before = [slice(None)] * padded.ndim
        after = [slice(None)] * padded.ndim
        before[lead + axis] = slice(0, b)
        after[lead + axis] = slice(padded.shape[lead + axis] - e, None)
        padded[tuple(before)] = value
        padded[tuple(after)] = value
    inner = [slice(None)] * lead + [
        slice(b, b + n) for b, n in zip(grow_begin, x.shape[lead:])
    ]
    padded[tuple(inner)] = x
    return padded


def windows(
    padded: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    """A read-only view ``(*lead, *kernel, *out_shape)`` of the sliding windows of ``padded``.

    Putting the kernel axes before the output axes makes a contiguous copy of the view the
    im2col matrix ``(C * prod(kernel), prod(out_shape))`` that one GEMM consumes.
    """
    rank = len(kernel)
    lead = padded.ndim - rank
    spatial_strides = padded.strides[lead:]
    shape = tuple(padded.shape[:lead]) + tuple(kernel) + tuple(out_shape)
    strides = (
        tuple(padded.strides[:lead])
        + tuple(st * d for st, d in zip(spatial_strides, dilations))
        + tuple(st * s for st, s in zip(spatial_strides, strides))
    )
    return np.lib.stride_tricks.as_strided(padded, shape, strides, writeable=False)


def compute_dtype(x: np.ndarray) -> np.dtype:
    """float16 (and other narrow floats) compute in float32; float64 stays float64."""
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)


class TapPlan:
    """Every kernel tap of a strided, dilated window as one long contiguous slice.

    Elementwise kernels (depthwise conv, pools) reduce over taps. Reading each tap as a strided
    N-d view makes numpy run short inner loops over rows; instead the padded input is split by
    stride phase (``x[r::s]`` for each residue ``r`` a tap needs) into flat buffers laid out on a
    common grid ``Q = ceil(padded / stride)``. Output ``h`` of tap ``o`` then reads phase
    ``o % s`` at grid position ``o // s + h``, so over the whole output the tap is the 1-D slice
    ``phase[offset : offset + L]`` with ``L = out[0] * prod(Q[1:])``. The result is computed on
    that wider grid and :meth:`crop` cuts it to the real output shape. Cells outside the input
    hold ``fill``.
    """

    def __init__(self, x, begin, end, kernel, strides, dilations, out_shape, fill, allocate=np.empty, offsets=None):
        self.out_shape = list(out_shape)
        lead = x.shape[:2]
        spatial = x.shape[2:]
        padded = [n + b + e for n, b, e in zip(spatial, begin, end)]
        self.grid = [max(-(-p // s), 1) for p, s in zip(padded, strides)]
        self.length = self.out_shape[0] * math.prod(self.grid[1:])
        grid_strides = [math.prod(self.grid[d + 1 :]) for d in range(len(self.grid))]
        taps = []
        # ``offsets``: the kernel indices per axis to visit (default all); a caller may leave out
        # taps that read only ``fill`` for every output position.
        per_axis = offsets if offsets is not None else [range(k) for k in kernel]
        for offset in itertools.product(*per_axis):
            shifted = [o * d for o, d in zip(offset, dilations)]
            residue = tuple(v % s for v, s in zip(shifted, strides))
            start = sum((v // s) * g for v, s, g in zip(shifted, strides, grid_strides))
            taps.append((residue, start))
        size = math.prod(self.grid)
        total = max(start + self.length for _, start in taps)
        self.phases = {}
        for residue in sorted({r for r, _ in taps}):
            buffer = allocate(lead + (max(total, size),), x.dtype)
            buffer.fill(fill)
            grid_view = buffer[..., :size].reshape(lead + tuple(self.grid))
            fill_phase(grid_view, x, residue, begin, strides)
            self.phases[residue] = buffer
        self.taps = taps

    def regions(self, channels: slice = slice(None)):
        """For each tap, the ``(N, C[channels], L)`` slice it reads."""
        for residue, start in self.taps:
            yield self.phases[residue][:, channels, start : start + self.length]

    def crop(self, flat: np.ndarray) -> np.ndarray:
        """``(..., L)`` computed on the wide grid -> ``(..., *out_shape)``."""
        grid = flat.reshape(flat.shape[:-1] + (self.out_shape[0],) + tuple(self.grid[1:]))
        keep = (Ellipsis, slice(None)) + tuple(slice(0, n) for n in self.out_shape[1:])
        return grid[keep]


def fill_phase(grid_view, x, residue, begin, strides):
    """Copy the input cells of one stride phase into their grid positions."""
    target = [slice(None), slice(None)]
    source = [slice(None), slice(None)]
    for r, b, s, n, q in zip(residue, begin, strides, x.shape[2:], grid_view.shape[2:]):
        # Grid position t holds padded cell r + s*t, i.e. input cell r - b + s*t.
        t_start = max(0, -(-(b - r) // s))
        x_start = r - b + s * t_start
        count = min(q - t_start, max(0, -(-(n - x_start) // s)))
        if count <= 0:
            return
        target.append(slice(t_start, t_start + count))
        source.append(slice(x_start, x_start + s * (count - 1) + 1, s))
    grid_view[tuple(target)] = x[tuple(source)]


# Channels from which a channels-first image whose planes are a multiple of 4 KiB (a 32x32
# float32 map) is transposed through a pitched copy (see PlanesToRows); below it, or on other
# plane sizes, the direct transpose is as fast.
PITCHED_MIN_CHANNELS = 16
# The same for planes of 1-3 KiB: there the direct transpose of up to 32 channels of a 16x16
# map took about 60% of the pitched one's time (3-5 against 6-8 µs), 48 channels 120%.
PITCHED_SMALL_PLANE_MIN_CHANNELS = 48


def transposes_through_pitch(channels: int, height: int, width: int, itemsize: int) -> bool:
    """Whether PlanesToRows beats the direct transpose for this image."""
    plane = height * width * itemsize
    if plane < 1024 or plane % 1024:
        return False
    return channels >= (PITCHED_MIN_CHANNELS if plane >= 4096 else PITCHED_SMALL_PLANE_MIN_CHANNELS)
# Elements added to each plane's row pitch: 64 bytes, one cache line, for float32.
_PITCH_PAD = 16


class PlanesToRows:
    """Copies a channels-first image ``(C, H, W)`` into a channels-last ``(H, W, C)`` buffer.

    The direct transpose reads one element from each of C planes per output pixel. When a
    plane's size is a multiple of 1 KiB (a 16x16 or 32x32 float32 map) those C reads fall in
    the same few L1 cache sets and evict each other: a 48-channel 32x32 image took 200-330 µs.
    The image is first copied as it is into planes whose pitch is a cache line longer (a
    contiguous copy, a few µs), then transposed from there, where the reads spread over the
    sets (55 µs for that image). The pitched buffer is the caller's (one per thread)."""

    def __init__(self, channels: int, height: int, width: int):
        self.shape = (channels, height, width)
        self.pitch = height * width + _PITCH_PAD

    def buffer(self, dtype) -> np.ndarray:
        return np.empty((self.shape[0], self.pitch), dtype)

    def __call__(self, image: np.ndarray, rows: np.ndarray, buffer: np.ndarray) -> None:
        channels, height, width = self.shape
        planes = buffer[:, : height * width].reshape(channels, height, width)
        np.copyto(planes, image)
        np.copyto(rows, planes.transpose(1, 2, 0))
