"""Conv: N-d convolution with groups, dilations, strides and padding.

https://onnx.ai/onnx/operators/onnx__Conv.html

Five paths, picked by shape, all computing the same thing:

- pointwise (every kernel extent 1): the input *is* the im2col matrix, so one GEMM per image,
  ``W (M, C) @ X (C, H*W)``, or for a channels-last input (see :mod:`lite.ops._layout`) on all
  but small images ``X (H*W, C) @ W^T`` with the output channels-last too: no copy beyond an
  optional stride subsample (of a channels-first input: :class:`lite.ops._conv_gemm.StridedPointwise`);
- depthwise (group == input channels): sums of shifted elementwise products, channels-last
  (one einsum per column phase) or over tap slices (see :mod:`lite.ops._depthwise`); on small
  maps a dense weighted sum or two batched products (see :mod:`lite.ops._depthwise_small`);
- 3x3 stride 1 with enough channels, when the engine prepared the weights at load (see
  ``prepare_conv``): Winograd F(2x2, 3x3), 2.25x fewer multiplications (see
  :mod:`lite.ops._winograd`);
- grouped (not depthwise) on small 2-D images, and one-group stride-1 ones where it pays (16x16
  maps): im2col on the image's stride-phase grid, one contiguous copy per tap and channel and
  one GEMM batched over the groups (see :mod:`lite.ops._phase_grid`);
- general: on small 2-D images the whole im2col matrix copied at once and one GEMM
  (:class:`lite.ops._conv_gemm.Im2col`); otherwise im2col as a strided view of the padded input
  laid out ``(C, *kernel, *out)``, copied a block of output rows at a time into a bounded buffer,
  then one GEMM ``W (M/g, C/g*K) @ cols (C/g*K, rows*W)`` per block that writes straight into the
  NCHW output; for 2-D images where it costs few extra columns, on a wide grid whose tap rows
  are contiguous (see :mod:`lite.ops._conv_blocks` and :mod:`lite.ops._wide_im2col`).

This module picks the path (:func:`_layer`); :mod:`lite.ops._conv_gemm` holds the one-GEMM
layers and :mod:`lite.ops._conv_blocks` the block-by-block paths.

Bias and the node's fused activation (keyword-only ``fused_activation``, see
:mod:`lite.ops.registry`) are applied to each block of the output right after its GEMM, while it
is still in cache, instead of in separate passes over the whole tensor.

Everything but the data is decided once per input shape, layout and dtype: a *layer* (the
callable ``layer(X, allocate) -> Y`` that :func:`_layer` builds) holds the resolved attributes,
the path and what it precomputes. For constant weights the engine's ``prepare`` hook gives the
kernel a :class:`PreparedConv` that keeps the layers between calls; on a small model (64x64
MobileNets, 1-2 µs per numpy call) resolving attributes and picking the path on every call was
most of a convolution's time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from lite.errors import KernelError
from lite.ops import _phase_grid as phase_grid
from lite.ops import _wide_im2col as wide_im2col
from lite.ops import _winograd as winograd
from lite.ops._conv_blocks import Direct
from lite.ops._conv_common import compute_dtype, output_shape, resolve_pads, spatial_defaults
from lite.ops._conv_gemm import Im2col, Pointwise, Rows, StridedPointwise
from lite.ops._depthwise import depthwise_layer
from lite.ops._depthwise_small import small_map_layer
from lite.ops._phase_grid import PhaseGrid
from lite.ops.registry import kernel
from lite.plan_cache import PlanCache

# A grouped convolution whose im2col columns (all groups) fit this runs as one batched GEMM.
_GROUPED_COLUMNS_BYTES = 1 << 20


def prepare_conv(constants, shapes, *, auto_pad="NOTSET", group=1, kernel_shape=None, pads=None, strides=None,
                 dilations=None, **_):
    """Load-time work for constant weights (the ``prepare`` hook of lite.ops.registry): a
    :class:`PreparedConv` holding them, with the Winograd transform of 3x3 stride-1 kernels
    applied to images large enough to gain from it. Attributes it cannot read (a damaged model)
    prepare nothing: the kernel reports them when run."""
    weights = constants[1] if len(constants) > 1 else None
    if not isinstance(weights, np.ndarray) or weights.ndim < 3 or weights.dtype.kind != "f":
        return None
    rank = weights.ndim - 2
    attributes = [kernel_shape or list(weights.shape[2:]), pads or [0] * 2 * rank, strides or [1] * rank,
                  dilations or [1] * rank]
    if not isinstance(group, int) or not all(_ints(value) for value in attributes) or not isinstance(auto_pad, str):
        return None
    bias = constants[2] if len(constants) > 2 else None
    bias_known = len(constants) < 3 or isinstance(bias, np.ndarray)
    return PreparedConv(weights, bias, bias_known, _prepare_winograd(weights, shapes, auto_pad, group, *attributes))


def _prepare_winograd(weights, shapes, auto_pad, group, kernel, pads, strides, dilations):
    if not winograd.suits(weights.shape, group, kernel, strides, dilations):
        return None
    spatial = (shapes[0] or ())[2:]
    if len(spatial) == 2 and all(isinstance(size, int) for size in spatial):
        # Declared sizes: prepare only what the kernel will use (3x3, stride 1: out = in + pads - 2).
        begin, end = resolve_pads("Conv", auto_pad, pads, spatial, [3, 3], [1, 1], [1, 1])
        if not winograd.fits(weights.shape[1], weights.shape[0], output_shape(spatial, [3, 3], [1, 1], [1, 1], begin, end)):
            return None
    dtype = np.float64 if weights.dtype == np.float64 else np.float32
    return winograd.transform_weights(weights, dtype)


def _ints(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value)


class PreparedConv:
    """A Conv node's constant weights (and bias, when constant too) as the engine prepared them,
    and the layers built from them: one :class:`_Layer`-like callable per input shape, layout,
    dtype and fused activation seen, everything about the call but the data decided when it
    was built (at most ``_LAYERS``; the engine's per-call overhead was most of a small
    model's convolutions)."""

    def __init__(self, weights: np.ndarray, bias: np.ndarray | None, bias_known: bool,
                 winograd_weights: np.ndarray | None):
        self.weights = weights
        self.bias = bias
        self.bias_known = bias_known  # False: the bias is computed at run time
        self.winograd = winograd_weights
        self.layers: PlanCache[Callable] = PlanCache(entries=_LAYERS)

    def remember(self, key: tuple, layer: Callable) -> Callable:
        return self.layers.put(key, layer)

    def bind(self, attributes: dict, fused_activation) -> Callable | None:
        """The node's convolution as ``call(X, *constant inputs, allocate=np.empty)`` with its
        attributes and activation fixed (see lite.ops.registry: the engine calls it instead of
        the kernel), or None where the bias is computed at run time. The same layers as
        :func:`Conv` with these keywords, without passing and checking them on every call."""
        if not self.bias_known or not set(attributes) <= _ATTRIBUTES.keys():
            return None
        return _Bound(self, tuple(attributes.get(name, default) for name, default in _ATTRIBUTES.items()),
                      fused_activation)


# Conv's attributes and their defaults, in _layer's order.
_ATTRIBUTES = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
               "strides": None}


class _Bound:
    """A prepared Conv node bound to its attributes (see :meth:`PreparedConv.bind`): its own
    layers by input shape, strides and dtype."""

    def __init__(self, prepared: PreparedConv, attributes: tuple, activation):
        self.prepared = prepared
        self.attributes = attributes
        self.activation = activation
        self.layers: PlanCache[Callable] = PlanCache(entries=_LAYERS)

    def __call__(self, X, *_, allocate=np.empty):
        layer = self.layers.get((X.shape, X.strides, X.dtype))
        if layer is None:
            prepared = self.prepared
            layer = _layer(X, prepared.weights, prepared.bias, *self.attributes, self.activation, prepared.winograd)
            self.layers.put((X.shape, X.strides, X.dtype), layer)
        return layer(X, allocate)


# Layers one prepared node keeps, the least recently used dropped first: a server cycling through
# a few dozen batch sizes stays planned. Counted by entries alone: a layer's scratch (at most 2 MiB,
# lite.ops._phase_grid) is made per thread on its first call.
_LAYERS = 32


@kernel("Conv", since=1, prepare=prepare_conv)
def Conv(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
    fused_activation=None,
    prepared=None,
    allocate=np.empty,
):
    """Y = conv(X, W) + B, X ``(N, C, *spatial)``, W ``(M, C/group, *kernel)``."""
    attributes = (auto_pad, dilations, group, kernel_shape, pads, strides)
    if prepared is None:
        return _layer(X, W, B, *attributes, fused_activation, None)(X, allocate)
    if not prepared.bias_known:
        return _layer(X, prepared.weights, B, *attributes, fused_activation, prepared.winograd)(X, allocate)
    key = (X.shape, X.strides, X.dtype, fused_activation)
    layer = prepared.layers.get(key)
    if layer is None:
        layer = _layer(X, prepared.weights, prepared.bias, *attributes, fused_activation, prepared.winograd)
        layer = prepared.remember(key, layer)
    return layer(X, allocate)


def _layer(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides, activation, transformed):
    """The callable ``layer(X, allocate) -> Y`` computing this convolution for inputs shaped and
    laid out as ``X``: attributes resolved, the path picked by shape."""
    dtype = compute_dtype(X)
    x_shape = X.shape
    w = np.asarray(W, dtype=dtype)
    channels = x_shape[1] if len(x_shape) > 1 else 0
    out_channels = w.shape[0]
    if len(x_shape) < 3 or w.ndim != len(x_shape) or channels != w.shape[1] * group or out_channels % group:
        raise KernelError(
            f"Conv: input {tuple(x_shape)} and weight {w.shape} do not match for group={group} "
            "(expected X (N, C, ...), W (M, C/group, ...) with M divisible by group)"
        )
    spatial = x_shape[2:]
    kernel_dims, strides, dilations = spatial_defaults(
        "Conv", spatial, kernel_shape if kernel_shape else w.shape[2:], strides, dilations
    )
    begin, end = resolve_pads("Conv", auto_pad, pads, spatial, kernel_dims, strides, dilations)
    out_shape = output_shape(spatial, kernel_dims, strides, dilations, begin, end)
    if 0 in out_shape and 0 not in spatial:
        # ONNX Runtime refuses it too ("Invalid input shape"): an empty output would hide it.
        reach = [(k - 1) * d + 1 for k, d in zip(kernel_dims, dilations)]
        padded = [size + b + e for size, b, e in zip(spatial, begin, end)]
        raise KernelError(f"Conv: input of spatial size {list(spatial)} (padded {padded}) is smaller than the "
                          f"kernel's reach {reach}: give a larger input")
    bias = None if B is None else np.asarray(B, dtype=dtype)
    plain = not any(begin) and not any(end) and all(s == 1 for s in strides)
    if group == channels and group > 1:
        if len(x_shape) == 4 and out_channels == channels:
            layer = small_map_layer(x_shape, w, bias, activation, begin, end, strides, dilations, out_shape,
                                    dtype) or depthwise_layer(x_shape, w, bias, activation, begin, end, strides,
                                                              dilations, out_shape, dtype)
        else:
            layer = Direct("depthwise taps", w, bias, activation, begin, end, strides, dilations, out_shape,
                            group, kernel_dims)
    elif (
        transformed is not None
        and transformed.dtype == dtype
        and transformed.shape[1:] == (out_channels, channels)
        and winograd.suits(w.shape, group, kernel_dims, strides, dilations)
        and winograd.fits(channels, out_channels, out_shape)
    ):
        layer = Direct("winograd", transformed, bias, activation, begin, end, strides, dilations, out_shape,
                        group, kernel_dims)
    elif plain and group == 1 and all(k == 1 for k in kernel_dims):
        layer = Pointwise(X, w, bias, activation)
    elif StridedPointwise.suits(X, group, kernel_dims, begin, end, strides):
        layer = StridedPointwise(X, w, bias, activation, strides, out_shape)
    elif phase_grid.suits(X, w, group, kernel_dims, begin, end, strides, out_shape):
        layer = PhaseGrid(X, w, bias, activation, kernel_dims, begin, end, strides, dilations, out_shape, group)
    elif Im2col.suits(X, w, group, begin, end, out_shape):
        layer = Im2col(X, w, bias, activation, kernel_dims, begin, end, strides, dilations, out_shape, group)
    elif len(x_shape) == 3 and Im2col.suits(X[:, :, None], w[:, :, None], group, [0, *begin], [0, *end], [1, *out_shape]):
        # 1-D (audio front ends): the 2-D layer over images one row high.
        layer = Rows(Im2col(X[:, :, None], w[:, :, None], bias, activation, [1, *kernel_dims], [0, *begin],
                              [0, *end], [1, *strides], [1, *dilations], [1, *out_shape], group))
    else:
        layer = Direct(_direct_path(X, w, group, kernel_dims, begin, end, strides, out_shape), w, bias,
                        activation, begin, end, strides, dilations, out_shape, group, kernel_dims)
    if X.dtype == dtype:
        return layer
    return _Cast(layer, dtype)


def _direct_path(x, w, group, kernel_dims, begin, end, strides, out_shape) -> str:
    """The path of a convolution that is neither depthwise, Winograd nor a plain pointwise one."""
    if all(k == 1 for k in kernel_dims):
        return "pointwise"
    if group > 1 and x.shape[1] * math.prod(kernel_dims) * math.prod(out_shape) * w.itemsize <= _GROUPED_COLUMNS_BYTES:
        return "grouped"
    if wide_im2col.suits(x, begin, end, strides, out_shape):
        return "wide"
    return "im2col"

class _Cast:
    """A layer for inputs of a narrower float type (float16): computed in float32, the fused
    activation included, then rounded to the input's type once, as ONNX Runtime runs float16
    convolutions on CPUs without float16 kernels. (The activation applied after the rounding,
    in float16, rounded the output twice, a HardSwish 1.5 float16 steps off against ONNX
    Runtime's 1, and numpy's element-by-element float16 arithmetic cost more than the
    convolution.)"""

    def __init__(self, layer, dtype):
        self.layer = layer
        self.dtype = dtype

    def __call__(self, X: np.ndarray, allocate) -> np.ndarray:
        return self.layer(np.asarray(X, dtype=self.dtype), allocate).astype(X.dtype, copy=False)
