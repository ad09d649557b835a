"""The stages of a separable chain (lite.ops._separable_chain): pointwise and depthwise
convolutions and squeeze-and-excitation blocks on a batch-1 small map, each with its weights
laid out for the chain's kernel.

https://onnx.ai/onnx/operators/onnx__Conv.html
"""

from __future__ import annotations

import copy

import numpy as np

from lite.errors import LiteError
from lite.ops._conv_common import output_shape, resolve_pads, spatial_defaults
from lite.ops._helpers import full_operand

__all__ = ["MAX_PIXELS", "DepthwiseStage", "PointwiseStage", "SqueezeStage", "fold_depthwise_biases",
           "output_shape_of", "squeeze_stage", "stage"]

# Outputs of at most this many pixels per stage take the fused run; larger maps keep the layers
# (their banded depthwise forms and threaded GEMMs pay off there).
MAX_PIXELS = 1024
# A depthwise stage strides across by at most this much (one column phase per step).
MAX_STRIDE = 4
# Up to this many output pixels a depthwise stage strided across reads one view striding over
# the image rather than column phases: filling the phases cost more than the phases' long rows
# saved on 4x4 and 2x2 outputs (48 channels 8x8 -> 4x4: 10 against 15 µs; 96 channels 16x16 ->
# 8x8: 60 against 48).
STRIDED_MAX_PIXELS = 16
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
    if group == channels == out_channels and weights.shape[1] == 1 and channels > 1 and strides[1] <= MAX_STRIDE:
        return DepthwiseStage(weights, bias, activation, height, width, begin, end, strides, dilations, out_shape)
    return None


def _halved(weights: np.ndarray, bias: np.ndarray | None, activation) -> tuple:
    """``(weights, bias, halved)``: for a SiLU stage the weights and bias times 1/2 (exact, so
    the product is ``x / 2`` as the activation's first pass would make it; see
    lite.ops.fused_activation.silu_of_half), else as given."""
    if activation is None or activation[0] != "Silu":
        return weights, bias, False
    half = weights.dtype.type(0.5)
    return weights * half, None if bias is None else bias * half, True


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
        weights, bias, self.halved = _halved(weights, bias, activation)
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
        self.activation = activation
        self._set_bias(bias)

    def _set_bias(self, bias: np.ndarray | None) -> None:
        # Rows (P, M) between stages; the run's last output channels-first (M, P).
        pixels, out_channels = self.height * self.width, self.out_channels
        self.bias_vector = bias
        self.bias = None if bias is None else full_operand(bias, (pixels, out_channels))
        self.bias_first = None if bias is None else full_operand(bias[:, None], (out_channels, pixels))

    def plus_constant_input(self, constant: np.ndarray) -> PointwiseStage:
        """A copy of the stage whose input is its input plus ``constant`` (C,) on every pixel:
        the same weights, ``W @ constant`` added to the bias (summed in float64)."""
        added = self.matrix.astype(np.float64) @ constant.astype(np.float64)
        if self.bias_vector is not None:
            added += self.bias_vector
        stage = copy.copy(self)
        stage._set_bias(added.astype(self.dtype))
        return stage


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
    """A depthwise 2-D convolution (``group`` == channels, one output per channel).

    Its zero-bordered input is kept in ``stride`` *column phases* (every ``stride``-th padded
    column, ``(phases, padded rows, Q, C)``, as lite.ops._depthwise's wide form): kernel column
    ``j`` reads phase ``j * d % stride`` shifted by ``j * d // stride`` columns, so in each phase
    an output row's ``out_w * C`` cells are contiguous and its taps are one strided view
    ``(kh, taps, out_h, out_w * C)`` summed by one einsum with the weights tiled ``out_w``
    times. At stride 1 that is the padded image itself, which the previous stage writes into;
    strided across, the stage copies its input rows into the phases (a view striding over the
    image instead, its inner rows C cells, took twice as long on 32x32 and 16x16 maps but less
    on outputs of up to STRIDED_MAX_PIXELS: see there)."""

    kind = "depthwise"

    def __init__(self, weights: np.ndarray, bias: np.ndarray | None, activation, height: int, width: int,
                 begin, end, strides, dilations, out_shape):
        channels = weights.shape[0]
        kernel_h, kernel_w = weights.shape[2:]
        weights, bias, self.halved = _halved(weights, bias, activation)
        self.dtype = weights.dtype
        self.channels = self.out_channels = channels
        self.height, self.width = height, width
        self.out_h, self.out_w = out_shape
        self.top, self.left = begin
        # Strided across on small outputs: one view striding over the padded image (inner rows
        # of C cells) instead, with no phases to fill.
        strided = strides[1] > 1 and self.out_h * self.out_w <= STRIDED_MAX_PIXELS
        step = 1 if strided else strides[1]
        padded_h = height + begin[0] + end[0]
        grid_w = -(-(width + begin[1] + end[1]) // step)
        self.buffer_shape = (step, padded_h, grid_w, channels)
        # Image column x is padded column x + left: phase (x + left) % step, column (x + left) // step.
        # Per phase holding image columns: (phase, its first column, the image's first column, count).
        self.fills = []
        for phase in range(step):
            first = (phase - begin[1]) % step
            if first < width:
                self.fills.append((phase, (first + begin[1]) // step, first, len(range(first, width, step))))
        item = weights.dtype.itemsize
        row = grid_w * channels * item
        taps = weights[:, 0].transpose(1, 2, 0)  # (kh, kw, C)
        # Per phase read: (shape, strides, byte offset) of its view, and its weights (kh, taps, out_w * C).
        self.views = []
        self.weights = []
        if strided:
            self.views.append(((kernel_h, kernel_w, self.out_h, self.out_w, channels),
                               (dilations[0] * row, dilations[1] * channels * item, strides[0] * row,
                                strides[1] * channels * item, item), 0))
            self.weights.append(np.ascontiguousarray(taps))
            self.subscripts = "ijrwc,ijc->rwc"
            self.out_shape = (self.out_h, self.out_w, channels)
        else:
            columns: dict[int, list[int]] = {}
            for j in range(kernel_w):
                columns.setdefault(j * dilations[1] % step, []).append(j)
            for phase, js in sorted(columns.items()):
                offsets = [j * dilations[1] // step for j in js]
                spacing = offsets[1] - offsets[0] if len(offsets) > 1 else 1
                self.views.append(((kernel_h, len(js), self.out_h, self.out_w * channels),
                                   (dilations[0] * row, spacing * channels * item, strides[0] * row, item),
                                   phase * padded_h * row + offsets[0] * channels * item))
                tiled = np.empty((kernel_h, len(js), self.out_w, channels), weights.dtype)
                tiled[...] = taps[:, js, None, :]
                self.weights.append(tiled.reshape(kernel_h, len(js), self.out_w * channels))
            self.subscripts = "ijrk,ijk->rk"
            self.out_shape = (self.out_h, self.out_w * channels)
        self.activation = activation
        self.bias_vector = None if bias is None else bias.astype(weights.dtype)
        self.bias = None if bias is None else full_operand(
            np.broadcast_to(self.bias_vector, (self.out_h * self.out_w, channels)).reshape(self.out_shape),
            self.out_shape)

    def without_bias(self) -> DepthwiseStage:
        """A copy of the stage without its bias."""
        stage = copy.copy(self)
        stage.bias_vector = stage.bias = None
        return stage

    @property
    def phased(self) -> bool:
        """Whether the input is split into column phases (stride > 1 across): the previous
        stage then writes rows (P, C), which this stage copies into its phases."""
        return self.buffer_shape[0] > 1


def fold_depthwise_biases(stages: list) -> list:
    """``stages`` with the bias of each depthwise stage without activation that a pointwise
    stage follows moved into the pointwise stage's: ``W (dw(x) + b) + c = W dw(x) + (W b + c)``
    (equal to rounding), one pass fewer over the depthwise output (ShuffleNet's and GhostNet's
    depthwise convolutions have no activation)."""
    folded = list(stages)
    for index, (first, second) in enumerate(zip(stages, stages[1:])):
        if (first.kind == "depthwise" and first.activation is None and first.bias_vector is not None
                and second.kind == "pointwise"):
            folded[index] = first.without_bias()
            folded[index + 1] = second.plus_constant_input(first.bias_vector)
    return folded


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
