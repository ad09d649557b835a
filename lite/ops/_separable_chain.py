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
- depthwise (one output channel per input channel): a strided view of the padded buffer
  ``(kh, kw, out_h, out_w, C)`` whose tap ``(i, j)`` is the window's shift, summed by one
  ``einsum`` with the weights ``(kh, kw, C)``; at stride 1 across, an output row's
  ``out_w * C`` cells are contiguous in the buffer, so the view is ``(kh, kw, out_h, out_w * C)``
  with the weights tiled ``out_w`` times (long inner loops).

The output is channels-last (see :mod:`lite.ops._layout`). Products are those of the layers run
one by one (same operands, same summation order per output cell within numpy's einsum and BLAS
up to their blocking), so results agree to float rounding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from lite.errors import KernelError, LiteError
from lite.ops import fused_activation as activations
from lite.ops._conv_common import (
    PlanesToRows,
    output_shape,
    resolve_pads,
    spatial_defaults,
    transposes_through_pitch,
)
from lite.ops._helpers import einsum, full_operand

# Outputs of at most this many pixels per stage take the fused run; larger maps keep the layers
# (their banded depthwise forms and threaded GEMMs pay off there).
MAX_PIXELS = 1024
# A strided depthwise stage only up to this many output pixels: its view's inner rows are C
# cells, and on larger maps with few channels the layer's stride-phase form was faster (a
# 48-channel 32x32 map: 83 against 55 µs).
STRIDED_MAX_PIXELS = 64
# A run ending with a pointwise stage writes channels-last from this many pixels on (see
# SeparableChain).
CHANNELS_LAST_MIN_PIXELS = 64
# On maps of up to BLOCK_MAX_PIXELS, a pointwise stage's GEMM is split into blocks of output
# channels of at most BLOCK_MAX_PRODUCTS multiply-adds (pixels x in x out channels), and where it
# writes channels-first, of at most BLOCK_MAX_CHANNELS output channels (see PointwiseStage).
BLOCK_MAX_PIXELS = 256
BLOCK_MAX_PRODUCTS = 1_000_000
BLOCK_MAX_CHANNELS = 256


def stage(weights, bias, attributes: tuple, activation, x_shape: tuple, dtype) -> PointwiseStage | DepthwiseStage | None:
    """The stage computing a Conv of constant ``weights`` and ``bias`` (None, or constant) with
    ``attributes`` (auto_pad, dilations, group, kernel_shape, pads, strides: lite.ops.conv's
    order) and fused ``activation`` on a batch-1 2-D image of ``x_shape`` and float ``dtype``;
    None where the convolution is neither a plain pointwise nor a depthwise one, or its output
    has more than MAX_PIXELS cells."""
    auto_pad, dilations, group, kernel_shape, pads, strides = attributes
    dtype = np.dtype(dtype)
    if (len(x_shape) != 4 or x_shape[0] != 1 or dtype not in (np.float32, np.float64)
            or not isinstance(weights, np.ndarray) or weights.dtype != dtype or weights.ndim != 4
            or (bias is not None and (not isinstance(bias, np.ndarray) or bias.shape != weights.shape[:1]))):
        return None
    channels, height, width = x_shape[1:]
    out_channels = weights.shape[0]
    kernel_dims, strides, dilations = spatial_defaults("Conv", (height, width), kernel_shape or weights.shape[2:],
                                                       strides, dilations)
    if list(kernel_dims) != list(weights.shape[2:]):
        return None
    begin, end = resolve_pads("Conv", auto_pad, pads, (height, width), kernel_dims, strides, dilations)
    out_shape = output_shape((height, width), kernel_dims, strides, dilations, begin, end)
    if min(out_shape) < 1 or out_shape[0] * out_shape[1] > MAX_PIXELS or min(begin + end) < 0:
        return None
    bias = None if bias is None else bias.astype(dtype, copy=False)
    if (group == 1 and weights.shape[1] == channels and kernel_dims == [1, 1] and strides == [1, 1]
            and not any(begin) and not any(end)):
        return PointwiseStage(weights, bias, activation, height, width)
    if (group == channels == out_channels and weights.shape[1] == 1 and channels > 1
            and (strides[1] == 1 or out_shape[0] * out_shape[1] <= STRIDED_MAX_PIXELS)):
        return DepthwiseStage(weights, bias, activation, height, width, begin, end, strides, dilations, out_shape)
    return None


def output_shape_of(weights, attributes: tuple, x_shape: tuple) -> tuple | None:
    """The output shape of a 2-D Conv of ``weights`` with ``attributes`` (see :func:`stage`) on
    inputs of ``x_shape``, or None where it is not a 2-D convolution the attributes resolve."""
    auto_pad, dilations, group, kernel_shape, pads, strides = attributes
    if len(x_shape) != 4 or not isinstance(weights, np.ndarray) or weights.ndim != 4:
        return None
    try:
        kernel_dims, strides, dilations = spatial_defaults("Conv", x_shape[2:], kernel_shape or weights.shape[2:],
                                                           strides, dilations)
        begin, end = resolve_pads("Conv", auto_pad, pads, x_shape[2:], kernel_dims, strides, dilations)
    except (LiteError, ValueError, TypeError):
        return None
    return (x_shape[0], weights.shape[0], *output_shape(x_shape[2:], kernel_dims, strides, dilations, begin, end))


class PointwiseStage:
    """A 1x1 convolution (stride 1, no padding, one group) on a map of ``pixels`` cells.

    On a small map its GEMM runs in equal blocks of output channels, one batched np.matmul,
    where the whole product is past 10^6 multiply-adds or, written channels-first, 256 output
    channels: there OpenBLAS's GEMM was three times slower per multiply-add (it appears to leave
    its small-matrix kernel and pack the weights on every call, which a few pixels never repay).
    On one core, in µs: (4 x 512) @ (512 x 512) channels-first 83 -> 25 in 2 blocks,
    (4 x 112) @ (112 x 1280) 46 -> 16 in 8, (16 x 256) @ (256 x 256) as rows 30 -> 21 in 4,
    (64 x 128) @ (128 x 128) 19 -> 14 in 2. On 1024 pixels blocks were no faster."""

    kind = "pointwise"

    def __init__(self, weights: np.ndarray, bias: np.ndarray | None, activation, height: int, width: int):
        out_channels, channels = weights.shape[:2]
        self.dtype = weights.dtype
        self.channels, self.out_channels = channels, out_channels
        self.height, self.width = height, width
        self.out_h, self.out_w = height, width
        pixels = height * width
        self.matrix = np.ascontiguousarray(weights.reshape(out_channels, channels))
        self.transposed = np.ascontiguousarray(self.matrix.T)
        # Blocks of the product written as rows (P, M) and as channels-first (M, P).
        self.row_blocks = _blocks(pixels, channels, out_channels, out_channels)
        self.first_blocks = _blocks(pixels, channels, out_channels, BLOCK_MAX_CHANNELS)
        # (blocks, C, M / blocks): each block's columns of W^T, contiguous.
        self.transposed_blocks = None if self.row_blocks == 1 else np.ascontiguousarray(
            self.transposed.reshape(channels, self.row_blocks, -1).transpose(1, 0, 2))
        # Rows (P, M) between stages; the run's last output channels-first (M, P).
        self.bias = None if bias is None else full_operand(bias, (pixels, out_channels))
        self.bias_first = None if bias is None else full_operand(bias[:, None], (out_channels, pixels))
        self.activation = activation


def _blocks(pixels: int, channels: int, out_channels: int, max_channels: int) -> int:
    """The fewest equal blocks of output channels each within BLOCK_MAX_PRODUCTS multiply-adds
    and ``max_channels`` channels (1 on maps of more than BLOCK_MAX_PIXELS, or where no divisor
    of ``out_channels`` gives them)."""
    if pixels > BLOCK_MAX_PIXELS:
        return 1
    for blocks in range(1, out_channels + 1):
        if out_channels % blocks:
            continue
        size = out_channels // blocks
        if pixels * channels * size <= BLOCK_MAX_PRODUCTS and size <= max_channels:
            return blocks
    return 1


class DepthwiseStage:
    """A depthwise 2-D convolution (``group`` == channels, one output per channel)."""

    kind = "depthwise"

    def __init__(self, weights: np.ndarray, bias: np.ndarray | None, activation, height: int, width: int,
                 begin, end, strides, dilations, out_shape):
        channels = weights.shape[0]
        kernel_h, kernel_w = weights.shape[2:]
        self.dtype = weights.dtype
        self.channels = self.out_channels = channels
        self.height, self.width = height, width
        self.out_h, self.out_w = out_shape
        self.top, self.left = begin
        self.padded_shape = (height + begin[0] + end[0], width + begin[1] + end[1], channels)
        self.merged = strides[1] == 1
        item = weights.dtype.itemsize
        row = self.padded_shape[1] * channels * item
        taps = weights[:, 0].transpose(1, 2, 0)  # (kh, kw, C)
        if self.merged:
            self.view_shape = (kernel_h, kernel_w, self.out_h, self.out_w * channels)
            self.view_strides = (dilations[0] * row, dilations[1] * channels * item, strides[0] * row, item)
            tiled = np.empty((kernel_h, kernel_w, self.out_w, channels), weights.dtype)
            tiled[...] = taps[:, :, None, :]
            self.weights = tiled.reshape(kernel_h, kernel_w, self.out_w * channels)
            self.subscripts = "ijrk,ijk->rk"
            self.out_shape = (self.out_h, self.out_w * channels)
        else:
            self.view_shape = (kernel_h, kernel_w, self.out_h, self.out_w, channels)
            self.view_strides = (dilations[0] * row, dilations[1] * channels * item, strides[0] * row,
                                 strides[1] * channels * item, item)
            self.weights = np.ascontiguousarray(taps)
            self.subscripts = "ijrwc,ijc->rwc"
            self.out_shape = (self.out_h, self.out_w, channels)
        self.bias = None if bias is None else full_operand(
            np.broadcast_to(bias.astype(weights.dtype), (self.out_h * self.out_w, channels)).reshape(self.out_shape),
            self.out_shape)
        self.activation = activation


class SqueezeStage:
    """A squeeze-and-excitation block (lite.ops._squeeze_excite.SqueezeExcite, whose prepared
    weights it shares) on a map of ``height`` x ``width``: the rows times a gate of their means."""

    kind = "squeeze"

    def __init__(self, block, channels: int, height: int, width: int):
        self.block = block
        self.dtype = block.dtype
        self.channels = self.out_channels = channels
        self.height = self.out_h = height
        self.width = self.out_w = width
        self.mean_row = np.full((1, height * width), 1.0 / (height * width), block.dtype)


def squeeze_stage(block, x_shape: tuple, dtype) -> SqueezeStage | None:
    """The stage of a SqueezeExcite ``block`` on a batch-1 image of ``x_shape``, or None."""
    if (len(x_shape) != 4 or x_shape[0] != 1 or np.dtype(dtype) != block.dtype
            or x_shape[1] != block.w1_t.shape[0] or x_shape[2] * x_shape[3] > MAX_PIXELS):
        return None
    return SqueezeStage(block, *x_shape[1:])


class SeparableChain:
    """The stages in turn on a batch-1 image ``x`` ``(1, C, H, W)`` (channels-first or -last),
    as ``chain(x, allocate) -> y`` ``(1, M, out_h, out_w)`` laid out channels-last."""

    def __init__(self, stages: list, dtype):
        self.stages = stages
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
    # Each stage's input container: a depthwise stage's padded buffer interior, or a pointwise
    # stage's rows (P, C); the first stage reads x itself.
    buffers = {}
    for index, stage in enumerate(stages):
        if stage.kind == "depthwise":
            buffers[index] = np.zeros(stage.padded_shape, dtype)
    steps = []
    for index, stage in enumerate(stages):
        last = index == len(stages) - 1
        following = None if last else stages[index + 1]
        if following is None:
            target = None  # the storage, given at run time
        elif following.kind == "depthwise":
            padded = buffers[index + 1]
            target = padded[following.top: following.top + following.height,
                            following.left: following.left + following.width]
        else:
            target = np.empty((stage.out_h * stage.out_w, stage.out_channels), dtype)
            buffers[index + 1] = target
        if stage.kind == "pointwise":
            steps.append(_pointwise_step(stage, index == 0, target, dtype, chain.channels_first))
        elif stage.kind == "squeeze":
            steps.append(_squeeze_step(stage, index == 0, target))
        else:
            steps.append(_depthwise_step(stage, index == 0, buffers[index], target, dtype))

    def run(x: np.ndarray, storage: np.ndarray) -> None:
        value = x
        for step in steps:
            value = step(value, storage)

    return run


def _finish(bias, activation, dtype, total: np.ndarray | None) -> Callable[[np.ndarray], None]:
    """``finish(out)``: a stage's bias and activation, in place on ``out`` (its product) when
    ``total`` is None, else from ``total`` (the product) with the last pass writing into ``out``
    (the next stage's input, ``total``'s shape or a reshape of it)."""
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
    finish = _finish(stage.bias_first if channels_first else stage.bias, stage.activation, dtype, total)
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


def _depthwise_step(stage: DepthwiseStage, first: bool, padded: np.ndarray, target: np.ndarray | None, dtype):
    view = np.ndarray(stage.view_shape, dtype, padded, 0, stage.view_strides)
    view.flags.writeable = False
    interior = padded[stage.top: stage.top + stage.height, stage.left: stage.left + stage.width]
    total = None if target is None else np.empty(stage.out_shape, dtype)
    finish = _finish(stage.bias, stage.activation, dtype, total)
    weights, subscripts, out_shape = stage.weights, stage.subscripts, stage.out_shape
    # A channels-first image whose planes would evict each other in the transpose goes through
    # pitched planes (see lite.ops._conv_common.PlanesToRows).
    to_rows = planes = None
    if first and transposes_through_pitch(stage.channels, stage.height, stage.width, padded.itemsize):
        to_rows = PlanesToRows(stage.channels, stage.height, stage.width)
        planes = to_rows.buffer(dtype)

    def step(x: np.ndarray, storage: np.ndarray) -> np.ndarray:
        if first:
            if to_rows is not None and x.flags.c_contiguous:
                to_rows(x[0], interior, planes)
            else:
                np.copyto(interior, x[0].transpose(1, 2, 0))
        if target is None:
            out = storage.reshape(out_shape)
            einsum(subscripts, view, weights, out=out)
            finish(out)
            return out
        einsum(subscripts, view, weights, out=total)
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
