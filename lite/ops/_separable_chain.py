"""A run of pointwise (1x1) and depthwise convolutions on a small map as one kernel, channels-last.

https://onnx.ai/onnx/operators/onnx__Conv.html

An inverted residual block (MobileNetV2/V3, EfficientNet) and a separable convolution
(MobileNetV1) are a pointwise expansion, a depthwise convolution and a pointwise projection:

    x (P, C) ─► matmul W1^T ─► + b1, act ─► padded (H+2, W+2, E) ─► einsum taps ─► + b2, act
      ─► matmul W3^T ─► + b3, act ─► y (P, M)                           (P = H * W pixels)

On a 64x64 model's 8x8, 4x4 and 2x2 maps each convolution is a few µs of arithmetic and about as
much again of per-layer Python (picking the layer, allocating its output, filling the depthwise
convolution's padded buffer from a channels-first output). Here the whole run is the numpy
calls above and nothing else: each stage's last elementwise pass (its bias or activation) writes
straight into the next stage's input (the depthwise convolution's zero-bordered buffer, whose
border is zeroed once), the scratch is kept per thread, and only the run's output is allocated.

- pointwise: ``Y (P, M) = X (P, C) @ W^T``, ``X`` the rows of a channels-last image or the
  transpose of a channels-first one (BLAS reads either as is);
- depthwise (one output channel per input channel): strided views of the padded buffer whose
  tap ``(i, j)`` is the window's shift, summed by ``einsum`` with the weights: at stride 1
  across, an output row's ``out_w * C`` cells are contiguous in the buffer, so the view is
  ``(kh, kw, out_h, out_w * C)`` with the weights tiled ``out_w`` times (long inner loops);
  strided across, the same per column phase of the buffer (see
  lite.ops._separable_stages.DepthwiseStage), or on the smallest outputs one view
  ``(kh, kw, out_h, out_w, C)``.

The output is channels-last (see :mod:`lite.ops._layout`). Products are those of the layers run
one by one (same operands, same summation order per output cell within numpy's einsum and BLAS
up to their blocking), so results agree to float rounding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from lite.errors import KernelError
from lite.ops import fused_activation as activations
from lite.ops._conv_common import PlanesToRows, transposes_through_pitch
from lite.ops._helpers import einsum
from lite.ops._separable_stages import (
    MAX_PIXELS,
    DepthwiseStage,
    PointwiseStage,
    SqueezeStage,
    fold_depthwise_biases,
    output_shape_of,
    squeeze_stage,
    stage,
)

__all__ = ["CHANNELS_LAST_MIN_PIXELS", "MAX_PIXELS", "SeparableChain", "output_shape_of", "squeeze_stage", "stage"]

# A run ending with a pointwise stage writes channels-last from this many pixels on (see
# SeparableChain).
CHANNELS_LAST_MIN_PIXELS = 64
# A first depthwise stage in column phases transposes a channels-first image through pitched
# planes (where lite.ops._conv_common.transposes_through_pitch says so) from this many channels.
PHASED_PITCH_MIN_CHANNELS = 48


class SeparableChain:
    """The stages in turn on a batch-1 image ``x`` ``(1, C, H, W)`` (channels-first or -last),
    as ``chain(x, allocate) -> y`` ``(1, M, out_h, out_w)`` laid out channels-last."""

    def __init__(self, stages: list, dtype):
        self.stages = stages = fold_depthwise_biases(stages)
        self.dtype = np.dtype(dtype)
        last = stages[-1]
        # A last pointwise stage on a small map writes channels-first: a global pool after it
        # (the head of a classifier) reads contiguous planes, and the next block reads either
        # layout as is. On larger maps channels-last, as lite.ops._conv_gemm.Pointwise does: a
        # depthwise layer after it would transpose a large image.
        self.channels_first = last.kind == "pointwise" and last.out_h * last.out_w < CHANNELS_LAST_MIN_PIXELS
        for first, second in zip(stages, stages[1:]):
            if (first.out_channels, first.out_h, first.out_w) != (second.channels, second.height, second.width):
                raise KernelError("SeparableChain: each stage must take the previous stage's output shape")
        if self.channels_first:
            self.storage_shape = (1, last.out_channels, last.out_h, last.out_w)
        else:
            self.storage_shape = (1, last.out_h, last.out_w, last.out_channels)
        self._local = threading.local()

    def __call__(self, x: np.ndarray, allocate: Callable = np.empty) -> np.ndarray:
        run = getattr(self._local, "run", None)
        if run is None:
            run = self._local.run = _runner(self)
        storage = allocate(self.storage_shape, self.dtype)
        run(x, storage)
        return storage if self.channels_first else storage.transpose(0, 3, 1, 2)


def _runner(chain: SeparableChain) -> Callable[[np.ndarray, np.ndarray], None]:
    """``run(x, storage)`` with this thread's scratch: one closure per stage, each ending by
    writing into the next stage's input (or the storage)."""
    dtype = chain.dtype
    stages = chain.stages
    # Each depthwise stage's zero-bordered buffers; each stage's input container: the padded
    # image of a depthwise stage at stride 1, else rows (P, C); the first stage reads x itself.
    buffers = {index: np.zeros(part.buffer_shape, dtype) for index, part in enumerate(stages)
               if part.kind == "depthwise"}
    steps = []
    for index, part in enumerate(stages):
        following = stages[index + 1] if index + 1 < len(stages) else None
        if following is None:
            target = None  # the storage, given at run time
        elif following.kind == "depthwise" and not following.phased:
            target = buffers[index + 1][0, following.top: following.top + following.height,
                                        following.left: following.left + following.width]
        else:
            target = np.empty((part.out_h * part.out_w, part.out_channels), dtype)
        if part.kind == "pointwise":
            steps.append(_pointwise_step(part, index == 0, target, dtype, chain.channels_first))
        elif part.kind == "squeeze":
            steps.append(_squeeze_step(part, index == 0, target))
        else:
            steps.append(_depthwise_step(part, index == 0, buffers[index], target, dtype))

    def run(x: np.ndarray, storage: np.ndarray) -> None:
        value = x
        for step in steps:
            value = step(value, storage)

    return run


def _finish(bias, activation, dtype, total: np.ndarray | None, halved: bool = False) -> Callable[[np.ndarray], None]:
    """``finish(out)``: a stage's bias and activation, in place on ``out`` (its product) when
    ``total`` is None, else from ``total`` (the product) with the last pass writing into ``out``
    (the next stage's input, ``total``'s shape or a reshape of it). A ``halved`` stage's product
    is half the convolution's, its activation SiLU (see lite.ops._separable_stages)."""
    if halved:
        # The tanh's: ``out`` where contiguous and not the product, else a buffer of the
        # product's shape (passes over a strided ``out`` are slower), decided on the first call.
        scratch = []

        def activate(x: np.ndarray, out: np.ndarray) -> None:
            if not scratch:
                own = x is out or not out.flags.c_contiguous
                scratch.append(np.empty(x.shape, dtype) if own else None)
            activations.silu_of_half(x, out, out if scratch[0] is None else scratch[0])
    else:
        activate = None if activation is None else activations.into(*activation, dtype)
    if total is None:
        def finish_in_place(out: np.ndarray) -> None:
            if bias is not None:
                np.add(out, bias, out=out)
            if activate is not None:
                activate(out, out)
        return finish_in_place

    def finish_into(out: np.ndarray) -> None:
        product = total.reshape(out.shape)
        if activate is None:
            if bias is None:
                np.copyto(out, product)
            else:
                # A bias of (C,) where too large to materialize (lite.ops._helpers.full_operand):
                # it broadcasts along the last axis, the channels, of every layout here.
                np.add(product, bias if bias.ndim == 1 else bias.reshape(out.shape), out=out)
            return
        if bias is not None:
            np.add(total, bias, out=total)
        activate(product, out)

    return finish_into


def _pointwise_step(stage: PointwiseStage, first: bool, target: np.ndarray | None, dtype,
                    last_channels_first: bool):
    pixels, channels, out_channels = stage.height * stage.width, stage.channels, stage.out_channels
    total = None if target is None else np.empty((pixels, out_channels), dtype)
    channels_first = target is None and last_channels_first
    finish = _finish(stage.bias_first if channels_first else stage.bias, stage.activation, dtype, total, stage.halved)
    product = _product(stage, channels_first)

    def step(x: np.ndarray, storage: np.ndarray) -> np.ndarray:
        rows = _rows(x, channels, pixels) if first else x
        if target is None and channels_first:
            out = storage.reshape(out_channels, pixels)
            product(rows, out)
            finish(out)
            return out
        if target is None:
            out = storage.reshape(pixels, out_channels)
            product(rows, out)
            finish(out)
            return out
        product(rows, total)
        finish(target)
        return target

    return step


def _product(stage: PointwiseStage, channels_first: bool) -> Callable[[np.ndarray, np.ndarray], None]:
    """``product(rows, out)``: ``rows (P, C) @ W^T`` into ``out``, laid out ``(M, P)`` where
    ``channels_first`` else ``(P, M)``, in the stage's blocks of output channels."""
    blocks = stage.first_blocks if channels_first else stage.row_blocks
    # np.dot: BLAS's GEMM with less of the ufunc machinery than np.matmul (0.5 µs a call).
    dot, matmul = np.dot, np.matmul
    if channels_first:
        matrix = stage.matrix
        if blocks == 1:
            return lambda rows, out: dot(matrix, rows.T, out=out)
        stacked = matrix.reshape(blocks, -1, stage.channels)  # each block's rows of W, contiguous
        return lambda rows, out: matmul(stacked, rows.T, out=out.reshape(blocks, -1, out.shape[1]))
    if blocks == 1:
        transposed = stage.transposed
        return lambda rows, out: dot(rows, transposed, out=out)
    transposed = stage.transposed_blocks

    def blocked(rows: np.ndarray, out: np.ndarray) -> None:
        # The blocks' outputs are column ranges of ``out``: (blocks, P, M / blocks) strided.
        matmul(rows, transposed, out=out.reshape(out.shape[0], blocks, -1).transpose(1, 0, 2))

    return blocked


def _depthwise_step(stage: DepthwiseStage, first: bool, buffers: np.ndarray, target: np.ndarray | None, dtype):
    views = []
    for shape, strides, offset in stage.views:
        view = np.ndarray(shape, dtype, buffers, offset, strides)
        view.flags.writeable = False
        views.append(view)
    (first_view, *more_views), (first_weights, *more_weights) = views, stage.weights
    more = list(zip(more_views, more_weights))
    spare = np.empty(stage.out_shape, dtype) if more else None
    # The image cells of each phase, and the image's columns they take (x seen (H, W, C)).
    fills = [(buffers[phase, stage.top: stage.top + stage.height, column: column + count],
              slice(image_column, None, stage.buffer_shape[0]))
             for phase, column, image_column, count in stage.fills]
    total = None if target is None else np.empty(stage.out_shape, dtype)
    finish = _finish(stage.bias, stage.activation, dtype, total, stage.halved)
    subscripts, out_shape = stage.subscripts, stage.out_shape
    channels, height, width = stage.channels, stage.height, stage.width
    # A channels-first image whose planes would evict each other in the transpose goes through
    # pitched planes (see lite.ops._conv_common.PlanesToRows): into the padded image, or where
    # phased into rows the phases are then filled from (a 32x32 map's stride-2 stage and a
    # pointwise one: 128 against 133 µs gathering the phases from the planes with 48 channels,
    # 193 against 206 with 72, but 94 against 88 with 32).
    to_rows = planes = rows = None
    if (first and (not stage.phased or channels >= PHASED_PITCH_MIN_CHANNELS)
            and transposes_through_pitch(channels, height, width, buffers.itemsize)):
        to_rows = PlanesToRows(channels, height, width)
        planes = to_rows.buffer(dtype)
        rows = fills[0][0] if not stage.phased else np.empty((height, width, channels), dtype)
    add, copyto = np.add, np.copyto
    pitched = to_rows is not None
    # Copied in by the step: a first stage's image, or a phased stage's input rows.
    phased = stage.phased
    fills_input = first or phased
    out_of_storage = target is None

    def step(x: np.ndarray, storage: np.ndarray) -> np.ndarray:
        if pitched and x.flags.c_contiguous:
            to_rows(x[0], rows, planes)
            if phased:
                for cells, columns in fills:
                    copyto(cells, rows[:, columns])
        elif fills_input:
            image = x[0].transpose(1, 2, 0) if first else x.reshape(height, width, channels)
            for cells, columns in fills:
                copyto(cells, image[:, columns])
        out = storage.reshape(out_shape) if out_of_storage else total
        einsum(subscripts, first_view, first_weights, out=out)
        if more:
            for view, weights in more:
                einsum(subscripts, view, weights, out=spare)
                add(out, spare, out=out)
        if out_of_storage:
            finish(out)
            return out
        finish(target)
        return target

    return step


def _squeeze_step(stage: SqueezeStage, first: bool, target: np.ndarray | None):
    block, mean_row = stage.block, stage.mean_row
    pixels, channels = stage.height * stage.width, stage.channels
    # Into the next stage's input: rows (P, C) or a depthwise buffer's interior (H, W, C).
    shape = None if target is None else target.shape
    dot, multiply = np.dot, np.multiply

    def step(x: np.ndarray, storage: np.ndarray) -> np.ndarray:
        rows = _rows(x, channels, pixels) if first else x
        gate = block.gate(dot(mean_row, rows))
        if target is None:
            out = storage.reshape(pixels, channels)
            return multiply(rows, gate, out=out)
        multiply(rows.reshape(shape), gate.reshape(-1), out=target)
        return target

    return step


def _rows(x: np.ndarray, channels: int, pixels: int) -> np.ndarray:
    """A batch-1 image as (P, C) rows: the transpose of a channels-first one, or a channels-last
    one's rows (a transposed view of its storage)."""
    if x.flags.c_contiguous:
        return x.reshape(channels, pixels).T
    return x.transpose(0, 2, 3, 1).reshape(pixels, channels)
