"""The fast path of a one-band channels-last depthwise layer (:mod:`lite.ops._depthwise`): each
thread's scratch, kept between calls, and a run loop with everything but the data looked up once.

A layer on a small map fits its output rows in one band, and there the Python between numpy's
calls was a third of the convolution's time: zeroing the phase buffers on every call, building
their views, reading the layer's attributes. The scratch of such a layer is zeroed once per
thread and geometry (the image cells a call copies in are the same on every call, the rest stay
zero) and shared by the layers of that geometry; the runner closes over it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.ops import fused_activation as activations
from lite.ops._conv_common import PlanesToRows, transposes_through_pitch
from lite.ops._helpers import einsum

if TYPE_CHECKING:
    from lite.ops._depthwise import DepthwiseChannelsLast, _Geometry


class OneBandScratch:
    """One thread's scratch for the one-band layers of a :class:`_Geometry`: the phase buffers
    (zero but for the image cells each call copies in: the same cells for every layer of the
    geometry), the accumulators, and the views of them a call uses."""

    def __init__(self, geometry: _Geometry, dtype):
        band = geometry.bands[0]
        self.dtype = dtype
        self.exact = geometry.exact
        self.buffers = np.zeros((len(geometry.phases), geometry.buffer_rows, geometry.grid_w, geometry.channels),
                                dtype)
        self.fills = self.all_fills = [(self.buffers[cells], source) for cells, source in band.filled]
        self.views = [np.ndarray(shape, dtype, self.buffers, offset, strides) for shape, strides, offset in band.views]
        for view in self.views:
            view.flags.writeable = False
        exact = geometry.exact
        band_shape = (band.rows, *geometry.exact_row) if exact else (band.rows, geometry.row)
        self.total = None if exact else np.empty(band_shape, dtype)
        self.cropped = None if exact else self.total.reshape(band.rows, geometry.grid_w, geometry.channels)[
            :, : geometry.out_w]
        self.spare = np.empty(band_shape, dtype) if len(geometry.phases) > 1 else None
        self.to_rows = self.planes = self.rows = None
        if transposes_through_pitch(geometry.channels, geometry.height, geometry.width, geometry.itemsize):
            self.to_rows = PlanesToRows(geometry.channels, geometry.height, geometry.width)
            self.planes = self.to_rows.buffer(dtype)
            self.rows = np.empty((geometry.height, geometry.width, geometry.channels), dtype)
            # One fill of the whole image (stride 1): transposed straight into it.
            if len(self.fills) == 1 and self.fills[0][0].shape == self.rows.shape:
                self.rows = self.fills[0][0]
                self.fills = []


def one_band_runner(layer: DepthwiseChannelsLast, scratch: OneBandScratch):
    """``run(x, storage)``: a one-band layer on ``x`` into ``storage`` ``(N, out_h, out_w, C)``
    (``(N, out_h, out_w * C)`` for the merged exact form)
    with this thread's scratch, everything but the data looked up once (a small map's
    convolution is a handful of numpy calls, and the Python between them was a third of its
    time); ``run.dtype`` is the scratch's."""
    exact = scratch.exact
    # The pitched transpose may fill the only phase buffer itself (then ``fills`` is empty).
    fills, all_fills, views, weights = scratch.fills, scratch.all_fills, scratch.views, layer.weights
    first_view, first_weights = views[0], weights[0]
    more = list(zip(views[1:], weights[1:]))
    subscripts, bias, spare, accumulator = layer.subscripts, layer.bias, scratch.spare, scratch.total
    # The wide rows are cropped to the output on the way through the activation.
    result = None if exact else scratch.cropped
    finish = None if layer.activation is None else activations.into(*layer.activation, scratch.dtype)
    to_rows, rows, planes = scratch.to_rows, scratch.rows, scratch.planes
    add, copyto = np.add, np.copyto

    def run(x: np.ndarray, storage: np.ndarray) -> None:
        # A channels-first image with many channels: transposed once through pitched planes
        # (see PlanesToRows), the phase buffers then filled from its channels-last copy (or
        # the only one being that copy).
        pitched = to_rows is not None and x.flags.c_contiguous
        image = x.transpose(0, 2, 3, 1)  # (N, H, W, C): a view; filling copies (and transposes) it
        for n in range(x.shape[0]):
            if pitched:
                to_rows(x[n], rows, planes)
                source_image = rows
                for cells, source in fills:
                    copyto(cells, source_image[source])
            else:
                source_image = image[n]
                for cells, source in all_fills:
                    copyto(cells, source_image[source])
            target = storage[n]
            total = target if exact else accumulator
            einsum(subscripts, first_view, first_weights, out=total)
            for view, weight in more:
                einsum(subscripts, view, weight, out=spare)
                add(total, spare, out=total)
            if bias is not None:
                add(total, bias, out=total)
            source = total if exact else result
            if finish is not None:
                finish(source, target)
            elif source is not target:
                copyto(target, source)

    run.dtype = scratch.dtype
    return run
