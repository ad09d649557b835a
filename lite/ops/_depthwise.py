"""Depthwise convolution (Conv with ``group`` == input channels): every channel filtered on its own.

https://onnx.ai/onnx/operators/onnx__Conv.html. A GEMM per channel would be all call overhead, so
both paths below are sums of shifted elementwise products:

- :func:`depthwise_channels_last` (2-D, one output per input channel: MobileNet's layers). Laid out
  channels-last, a padded image row is ``W * C`` contiguous elements, and a stride-``s`` image
  splits into ``s`` *column phases* (every ``s``-th column). Kernel column ``j`` then reads phase
  ``j % s`` shifted by ``j // s`` columns, and kernel row ``i`` shifts by ``i`` rows. So for one
  phase, its taps over all output rows form one strided view ``(kernel rows, taps, rows, ...)``
  and a single ``einsum`` sums them with a fused multiply-add, in one pass over the output:

      phase buffer (rows x Q x C), Q = ceil(padded width / s)

      y[r, q, c] = sum_i sum_j  phase[s*r + i, q + j, c] * w[i, j, c]

  *wide* form: ``(q, c)`` flattened to one axis of ``Q * C`` elements with the weights tiled
  along it, so the multiply-add runs over long contiguous rows and the ``Q - out_w`` columns past
  the image are computed and cropped; for many channels the *exact* form keeps ``(out_w, C)``
  and writes the output directly, and at stride 1 across its rows are ``out_w * C`` contiguous
  elements (the *merged* exact form, used for every stride-1 layer). Bands of output rows keep the scratch (the band's phase
  buffers and accumulator) bounded and in cache. The output is returned channels-last (see
  :mod:`lite.ops._layout`): a pointwise convolution after it reads it as it is.
- :func:`lite.ops._depthwise_taps.depthwise_taps` (any rank, channel multipliers): channels-first.
"""

from __future__ import annotations

import functools
import math
import threading
import weakref

import numpy as np

from lite.ops import fused_activation as activations
from lite.ops._conv_common import PlanesToRows, transposes_through_pitch
from lite.ops._depthwise_one_band import OneBandScratch, one_band_runner
from lite.ops._helpers import einsum, full_operand
from lite.ops.registry import SMALL_ARRAY_BYTES
from lite.plan_cache import PlanCache

# Scratch of one call, in elements: the band's phase buffers and accumulators (channels-last) or
# a block of channels' phase buffers, accumulator and spare (taps), about 1.1 MiB in float32.
# The memory planner's bound leaves room for about this much beside the live activations.
_DEPTHWISE_SCRATCH_ELEMENTS = 3 * 96 * 1024
# From this many channels on, the exact form's rows of C elements are long enough; below it the
# wide form's rows of Q * C elements win despite the cropped columns.
_EXACT_MIN_CHANNELS = 192
# Outputs at most this wide take the exact form from _EXACT_NARROW_MIN_CHANNELS channels on: the
# wide rows' cropped columns are then a third to half of them (a 4x4 map padded to 6 columns).
_EXACT_MAX_OUT_WIDTH = 4
_EXACT_NARROW_MIN_CHANNELS = 64
# One-band layers whose scratch is at most this big keep one per thread and geometry (see
# lite.ops._depthwise_one_band): zeroed once instead of on every call (a third of a 32x32
# map's stride-2 layer).
_KEPT_SCRATCH_BYTES = 512 * 1024
# Weight arrays whose layout one geometry remembers (see _Geometry.weights).
_REMEMBERED_WEIGHTS = 32


class _Band:
    """One band of output rows: which cells of each phase buffer stay zero and which hold image
    cells, as index tuples into the buffers ``(phases, rows, grid_w, C)`` and the input laid out
    ``(N, H, W, C)`` (without the batch index)."""

    def __init__(self, geometry: _Geometry, first_row: int, rows: int):
        self.first_row, self.rows = first_row, rows
        self.count = geometry.input_rows(rows)
        self.zeroed: list[tuple[slice | int, ...]] = []
        self.filled: list[tuple[tuple[slice | int, ...], tuple[slice, ...]]] = []  # (buffer cells, image cells)
        top = first_row * geometry.stride_h - geometry.top  # image row of buffer row 0
        t0, t1 = max(0, -top), min(self.count, geometry.height - top)
        for index, (phase, _, _, _) in enumerate(geometry.phases):
            # Buffer column q holds image column phase + step * q - left.
            step = geometry.phase_step
            left = phase - geometry.left
            q0 = max(0, -(-(-left) // step))
            q1 = min(geometry.grid_w, -(-(geometry.width - left) // step))
            # Rows past the band's input rows are read by the wide form's last row: zero too.
            if t1 <= t0 or q1 <= q0:
                self.zeroed.append((index,))
                continue
            zeroed = [(slice(0, t0),), (slice(t1, None),), (slice(t0, t1), slice(0, q0)),
                      (slice(t0, t1), slice(q1, None))]
            rows_held = geometry.buffer_rows
            self.zeroed.extend((index, *z) for z in zeroed if _nonempty(z, rows_held, geometry.grid_w))
            column = left + step * q0
            image = (slice(top + t0, top + t1), slice(column, column + step * (q1 - q0 - 1) + 1, step))
            self.filled.append(((index, slice(t0, t1), slice(q0, q1)), image))
        # Views of the phase buffers for this band's taps (see _Geometry.taps): shape, strides, offset.
        self.views = [geometry.tap_view(index, rows) for index in range(len(geometry.phases))]


def _nonempty(cells: tuple[slice, ...], rows: int, columns: int) -> bool:
    return all(len(range(*s.indices(n))) for s, n in zip(cells, (rows, columns)))


class _Geometry:
    """The channels-last path's plan for one input shape and set of attributes: the column
    phases, their taps, the bands of output rows and the scratch they need."""

    def __init__(self, x_shape, kernel, begin, end, strides, dilations, out_shape, budget, itemsize=4):
        self.batch, self.channels, self.height, self.width = x_shape
        self.kernel_h, kernel_w = kernel
        self.stride_h, self.stride_w = strides
        self.dilation_h, dilation_w = dilations
        self.top, self.left = begin
        self.out_h, self.out_w = out_shape
        self.itemsize = itemsize
        # Stride 1 across: an exact output row's out_w * C cells are contiguous in the buffers as
        # in the output, so the einsum runs over whole rows (the weights tiled out_w times), the
        # *merged* exact form. It took 0.6-0.7 of the C-at-a-time exact form's time on 4x4 and
        # 2x2 maps of 144-336 channels, and 0.7-1.0 of the wide form's on 8x8-32x32 maps of 8-120
        # channels (no cropped columns, no copy out of an accumulator).
        self.merged = self.stride_w == 1
        self.exact = self.merged or self.channels >= _EXACT_MIN_CHANNELS or (
            self.out_w <= _EXACT_MAX_OUT_WIDTH and self.channels >= _EXACT_NARROW_MIN_CHANNELS)
        self.exact_row = (self.out_w * self.channels,) if self.merged else (self.out_w, self.channels)
        # id(w) -> (w, laid out)
        self._weights: PlanCache[tuple[weakref.ref, list[np.ndarray]]] = PlanCache(entries=_REMEMBERED_WEIGHTS)
        # The wide form splits columns into stride phases; the exact form strides its view over
        # the padded image itself (one "phase" of every column).
        self.phase_step = 1 if self.exact else self.stride_w
        padded_w = self.width + begin[1] + end[1]
        self.grid_w = max(-(-padded_w // self.phase_step), 1)
        self.row = self.grid_w * self.channels  # elements of one phase-buffer row
        # Kernel columns by phase: column j reads phase (j*d) % s at column offset (j*d) // s.
        # The columns of one phase are an arithmetic progression, so are their offsets.
        columns: dict[int, list[int]] = {}
        for j in range(kernel_w):
            columns.setdefault(j * dilation_w % self.phase_step, []).append(j)
        self.phases = []  # (phase, kernel columns, first offset, offset step)
        for phase, js in sorted(columns.items()):
            offsets = [j * dilation_w // self.phase_step for j in js]
            step = offsets[1] - offsets[0] if len(offsets) > 1 else 1
            self.phases.append((phase, js, offsets[0], step))
        # The wide form reads up to this many columns past a row's end (cropped results).
        reach = max(first + (len(js) - 1) * step for _, js, first, step in self.phases)
        rows = self._band_rows(budget, reach)
        self.band = rows
        # Rows of one phase buffer: the band's input rows and those the last row's reach runs into.
        self.buffer_rows = self.input_rows(rows) + -(-reach // self.grid_w)
        self.bands = [_Band(self, first, min(rows, self.out_h - first)) for first in range(0, self.out_h, rows)]
        self._local = threading.local()

    def scratch(self, dtype) -> OneBandScratch:
        """This thread's scratch for one-band layers of this geometry: shared by all of them
        (a model's layers of one shape then reuse the same cache lines, and memory grows with
        the shapes, not the layers)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None or scratch.dtype != dtype:
            scratch = self._local.scratch = OneBandScratch(self, dtype)
        return scratch

    def input_rows(self, rows: int) -> int:
        """Padded input rows that ``rows`` consecutive output rows read."""
        return (rows - 1) * self.stride_h + (self.kernel_h - 1) * self.dilation_h + 1

    def _band_rows(self, budget: int, reach: int) -> int:
        """Output rows per band so the band's scratch (phase buffers, accumulators) stays within
        ``budget`` elements; bands of even height."""
        accumulators = (0 if self.exact else 1) + (1 if len(self.phases) > 1 else 0)

        def scratch(rows):
            buffers = len(self.phases) * (self.input_rows(rows) * self.row + reach * self.channels)
            return buffers + accumulators * rows * self.row

        per_row = scratch(2) - scratch(1)
        rows = max(1, min(self.out_h, 1 + (budget - scratch(1)) // max(per_row, 1)))
        bands = -(-self.out_h // rows)
        return -(-self.out_h // bands)

    def tap_view(self, phase: int, rows: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """Shape, strides and byte offset of the read-only view ``(kernel rows, taps, rows, ...)``
        of one phase buffer: the wide form ``(..., Q * C)``, the exact form ``(..., out_w, C)``."""
        _, js, first, step = self.phases[phase]
        item = self.itemsize
        offset = (phase * self.buffer_rows * self.row + first * self.channels) * item
        shape = (self.kernel_h, len(js), rows)
        strides = (self.dilation_h * self.row * item, step * self.channels * item, self.stride_h * self.row * item)
        if self.merged:
            shape, strides = shape + self.exact_row, strides + (item,)
        elif self.exact:
            shape = shape + (self.out_w, self.channels)
            strides = strides + (self.stride_w * self.channels * item, item)
        else:
            shape, strides = shape + (self.row,), strides + (item,)
        return shape, strides, offset

    def weights(self, w: np.ndarray) -> list[np.ndarray]:
        """Per phase, ``(kh, taps, C)``; the wide form tiles them along Q: ``(kh, taps, Q * C)``.

        Remembered per weight array (a model's constant weights are the same array on every
        call), through a weak reference that tells a reused id from the same array and keeps no
        model's weights alive: laying them out was a third of a small map's convolution."""
        known = self._weights.get(id(w))
        if known is not None and known[0]() is w:
            return known[1]
        weights = self.lay_out(w)
        self._weights.put(id(w), (weakref.ref(w), weights))
        return weights

    def lay_out(self, w: np.ndarray) -> list[np.ndarray]:
        kernel = w[:, 0].transpose(1, 2, 0)
        weights = []
        for _, js, _, _ in self.phases:
            taps = kernel[:, js]
            if self.merged:
                tiled = np.empty((self.kernel_h, len(js), self.out_w, self.channels), w.dtype)
                tiled[...] = taps[:, :, None, :]
                taps = tiled.reshape(self.kernel_h, len(js), self.out_w * self.channels)
            elif not self.exact:
                tiled = np.empty((self.kernel_h, len(js), self.grid_w, self.channels), w.dtype)
                tiled[...] = taps[:, :, None, :]
                taps = tiled.reshape(self.kernel_h, len(js), self.row)
            weights.append(np.ascontiguousarray(taps))
        return weights


@functools.lru_cache(maxsize=512)
def _geometry(x_shape, kernel, begin, end, strides, dilations, out_shape, budget, itemsize) -> _Geometry:
    return _Geometry(x_shape, kernel, begin, end, strides, dilations, out_shape, budget, itemsize)


class DepthwiseChannelsLast:
    """The channels-last path for one input shape, attributes and weights, everything but the
    data decided: the geometry, the weights laid out per phase, the bias tiled along the wide
    rows. A prepared Conv keeps one per input shape (lite.ops.conv), so a call on a small map
    is a handful of numpy calls: fill the phase buffers, one einsum per phase, bias and
    activation on the way into the output."""

    def __init__(self, geometry: _Geometry, weights: list[np.ndarray], bias, activation):
        self.geometry = geometry
        self.weights = weights
        if bias is not None and geometry.merged:
            tiled = np.empty((geometry.out_w, geometry.channels), bias.dtype)
            tiled[...] = bias
            bias = tiled.reshape(-1)
        if bias is not None and not geometry.exact:
            # Tiled along the wide rows: added over whole rows, whose inner loop is then a long
            # contiguous run (broadcasting C values over the cropped rows ran C at a time).
            tiled = np.empty((geometry.grid_w, geometry.channels), bias.dtype)
            tiled[...] = bias
            bias = tiled.reshape(-1)
        if bias is not None and len(geometry.bands) == 1:
            # The whole band's shape where small (an add without broadcasting).
            rows = geometry.bands[0].rows
            bias = full_operand(bias, (rows, *geometry.exact_row) if geometry.exact else (rows, geometry.row))
        self.bias = bias
        self.activation = activation
        self.subscripts = "ijrwc,ijc->rwc" if geometry.exact and not geometry.merged else "ijrk,ijk->rk"
        # One band: zeroing the whole (small) buffers costs less than its zero slices one by one.
        self.zero_all = len(geometry.bands) == 1 and len(geometry.bands[0].zeroed) > 1
        # One band whose scratch is small: each thread keeps its own, zeroed once (the cells a
        # call writes are the same on every call, the rest stay zero), with its views built.
        self.keeps_scratch = len(geometry.bands) == 1 and self._scratch_bytes() <= _KEPT_SCRATCH_BYTES
        self._local = threading.local()
        self.storage_shape = (geometry.batch, geometry.out_h, geometry.out_w, geometry.channels)
        # The storage as the exact form's rows (a view): out_w * C cells per output row where merged.
        self.rows_shape = (geometry.batch, geometry.out_h, *geometry.exact_row)
        self.small = math.prod(self.storage_shape) * geometry.itemsize < SMALL_ARRAY_BYTES

    def _scratch_bytes(self) -> int:
        geometry = self.geometry
        phases = len(geometry.phases)
        accumulators = (0 if geometry.exact else 1) + (1 if phases > 1 else 0)
        elements = phases * geometry.buffer_rows * geometry.row + accumulators * geometry.band * geometry.row
        return elements * geometry.itemsize

    def __call__(self, x: np.ndarray, allocate) -> np.ndarray:
        """``Y[n, c] = sum over taps of X[n, c, window] * W[c, 0, tap]`` (+ bias, activation),
        ``Y`` laid out channels-last."""
        # Outputs below the arena's floor: numpy's allocator directly, without the pool's call.
        storage = (np.empty if self.small else allocate)(self.storage_shape, x.dtype)
        if self.keeps_scratch:
            run = getattr(self._local, "run", None)
            if run is None or run.dtype != x.dtype:
                run = self._local.run = one_band_runner(self, self.geometry.scratch(x.dtype))
            run(x, storage.reshape(self.rows_shape) if self.geometry.merged else storage)
        else:
            self._run_bands(x, storage.reshape(self.rows_shape) if self.geometry.merged else storage, allocate)
        return storage.transpose(0, 3, 1, 2)

    def _run_bands(self, x: np.ndarray, storage: np.ndarray, allocate) -> None:
        geometry, weights, bias, activation = self.geometry, self.weights, self.bias, self.activation
        batch, channels, exact = x.shape[0], geometry.channels, geometry.exact
        out_w, grid_w = geometry.out_w, geometry.grid_w
        phases = len(geometry.phases)
        buffers = allocate((phases, geometry.buffer_rows, grid_w, channels), x.dtype)
        accumulator = None if exact else allocate((geometry.band, geometry.row), x.dtype)
        band_shape = (geometry.band, *geometry.exact_row) if exact else (geometry.band, geometry.row)
        spare = allocate(band_shape, x.dtype) if phases > 1 else None
        image = x.transpose(0, 2, 3, 1)  # (N, H, W, C): a view; filling copies (and transposes) it
        to_rows = planes = rows_image = None
        if x.flags.c_contiguous and transposes_through_pitch(channels, geometry.height, geometry.width,
                                                             geometry.itemsize):  # see _run_small
            to_rows = PlanesToRows(channels, geometry.height, geometry.width)
            planes = allocate((channels, to_rows.pitch), x.dtype)
            rows_image = allocate((geometry.height, geometry.width, channels), x.dtype)
        for n in range(batch):
            source_image = image[n]
            if to_rows is not None:
                to_rows(x[n], rows_image, planes)
                source_image = rows_image
            if self.zero_all:
                buffers.fill(0)
            for band in geometry.bands:
                rows = band.rows
                target = storage[n, band.first_row : band.first_row + rows]
                total = target if exact else accumulator[:rows]
                if not self.zero_all:
                    for cells in band.zeroed:
                        buffers[cells] = 0
                for cells, source in band.filled:
                    buffers[cells] = source_image[source]
                for phase, (shape, strides, offset) in enumerate(band.views):
                    view = np.ndarray(shape, buffers.dtype, buffers, offset, strides)
                    if phase == 0:
                        einsum(self.subscripts, view, weights[0], out=total)
                    else:
                        einsum(self.subscripts, view, weights[phase], out=spare[:rows])
                        np.add(total, spare[:rows], out=total)
                    del view
                if bias is not None:
                    np.add(total, bias, out=total)
                # The wide rows are cropped to the output on the way through the activation.
                source = total if exact else total.reshape(rows, grid_w, channels)[:, :out_w]
                if activation is not None:
                    activations.apply_into(source, target, *activation)
                elif source is not target:
                    np.copyto(target, source)
        del buffers, accumulator, spare, planes, rows_image


def depthwise_layer(x_shape, w, bias, activation, begin, end, strides, dilations, out_shape, dtype):
    """A :class:`DepthwiseChannelsLast` for inputs of ``x_shape`` (2-D, one output per input
    channel, ``w`` of shape ``(C, 1, kh, kw)`` in ``dtype``). The weights' layout is remembered
    per weight array (see :meth:`_Geometry.weights`): unprepared calls with the same weights
    reuse it."""
    geometry = _geometry(tuple(x_shape), tuple(w.shape[2:]), tuple(begin), tuple(end), tuple(strides),
                         tuple(dilations), tuple(out_shape), _DEPTHWISE_SCRATCH_ELEMENTS, np.dtype(dtype).itemsize)
    return DepthwiseChannelsLast(geometry, geometry.weights(w), bias, activation)
