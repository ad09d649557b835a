"""2-D convolution as im2col + one matrix product (BLAS), and col2im for the input gradient.

im2col is a zero-copy ``as_strided`` view of the padded input, shaped
``(N, OH, OW, C, kh, kw)``; one contiguous copy turns it into the ``(N*OH*OW, C*kh*kw)``
matrix that meets the weight, laid out as MindSpore stores it: ``(out, in/group, kh, kw)``.
col2im loops over the kh*kw kernel taps only, each a vectorized strided add, never over pixels.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from train import _trace
from train.autograd import make_result
from train.errors import ShapeError
from train.tensor import Tensor

Pads = tuple[int, int, int, int]  # top, bottom, left, right (MindSpore's order)


def _same_pad(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def resolve_pads(
    pad_mode: str,
    padding: int | tuple[int, ...],
    hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
) -> Pads:
    """Explicit pads for MindSpore's ``pad_mode``: 'same' (output = ceil(in/stride)), 'valid', 'pad'."""
    if pad_mode == "same":
        top, bottom = _same_pad(hw[0], kernel[0], stride[0], dilation[0])
        left, right = _same_pad(hw[1], kernel[1], stride[1], dilation[1])
        return top, bottom, left, right
    if pad_mode == "valid":
        return 0, 0, 0, 0
    if pad_mode == "pad":
        if isinstance(padding, int):
            return padding, padding, padding, padding
        if len(padding) == 4:
            return tuple(padding)  # type: ignore[return-value]
        raise ShapeError(f"padding must be an int or a 4-tuple (top, bottom, left, right), got {padding!r}")
    raise ShapeError(f"pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}")


def output_size(size: int, kernel: int, stride: int, dilation: int, pad: int) -> int:
    return (size + pad - (kernel - 1) * dilation - 1) // stride + 1


def pad_input(x: np.ndarray, pads: Pads, value: float = 0.0) -> np.ndarray:
    if not any(pads):
        return x
    top, bottom, left, right = pads
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def windows(
    xp: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    out_hw: tuple[int, int],
) -> np.ndarray:
    """Zero-copy view ``(C, kh, kw, N, OH, OW)`` of every receptive field of padded ``xp``.

    Channels-and-taps first makes im2col one ``(C*kh*kw, N*OH*OW)`` matrix whose rows are long
    runs of output pixels, so the copy and the product are both efficient, and the product
    ``weight @ cols`` comes out as ``(out, N, OH, OW)``: activations then flow through the
    network physically in CNHW order behind an NCHW view, which makes the gradient reshapes of
    the next backward pass free.
    """
    n, c = xp.shape[:2]
    s_n, s_c, s_h, s_w = xp.strides
    shape = (c, kernel[0], kernel[1], n, out_hw[0], out_hw[1])
    strides = (s_c, s_h * dilation[0], s_w * dilation[1], s_n, s_h * stride[0], s_w * stride[1])
    return as_strided(xp, shape=shape, strides=strides, writeable=False)


def tap(kernel_index: int, dilation: int, stride: int, count: int) -> slice:
    """The input rows (or columns) that kernel tap ``kernel_index`` touches, one per output."""
    start = kernel_index * dilation
    return slice(start, start + stride * (count - 1) + 1, stride)


def _grouped(group: int, left: np.ndarray, right: np.ndarray, left_axis: int, right_axis: int) -> np.ndarray:
    """Per group ``left_g @ right_g``, splitting ``left`` along ``left_axis`` and ``right`` along
    ``right_axis``; the products are stacked along axis 0 (every use puts groups on rows)."""
    if group == 1:
        return left @ right
    lefts = np.split(left, group, axis=left_axis)
    rights = np.split(right, group, axis=right_axis)
    return np.concatenate([a @ b for a, b in zip(lefts, rights)], axis=0)


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: tuple[int, int] = (1, 1),
    pads: Pads = (0, 0, 0, 0),
    dilation: tuple[int, int] = (1, 1),
    group: int = 1,
) -> Tensor:
    """NCHW convolution (``ops.Conv2D`` then ``BiasAdd``); weight ``(out, in/group, kh, kw)``."""
    n, c, h, w = x.shape
    out_c, c_per_group, kh, kw = weight.shape
    if c != c_per_group * group:
        raise ShapeError(
            f"conv2d: input has {c} channels but weight {weight.shape} with group={group} "
            f"expects {c_per_group * group}"
        )
    top, bottom, left, right = pads
    oh = output_size(h, kh, stride[0], dilation[0], top + bottom)
    ow = output_size(w, kw, stride[1], dilation[1], left + right)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv2d: input {x.shape} is smaller than the dilated kernel {(kh, kw)}")
    xp = pad_input(x.data, pads)
    cols = windows(xp, (kh, kw), stride, dilation, (oh, ow)).reshape(c * kh * kw, n * oh * ow)
    w2 = weight.data.reshape(out_c, -1)
    # group g: output rows g*out/group.., weight columns all of w2[g], cols rows g*c_per_group*kh*kw..
    out2 = _grouped(group, w2, cols, 0, 0)
    if bias is not None:
        out2 += bias.data[:, None]
    result = out2.reshape(out_c, n, oh, ow).transpose(1, 0, 2, 3)

    def backward(grad: np.ndarray) -> tuple:
        g2 = grad.transpose(1, 0, 2, 3).reshape(out_c, -1)
        d_bias = g2.sum(axis=1) if bias is not None and bias.requires_grad else None
        d_weight = d_x = None
        if weight.requires_grad:
            d_weight = _grouped(group, g2, cols.T, 0, 1).reshape(weight.shape)
        if x.requires_grad:
            d_cols = _grouped(group, w2.T, g2, 1, 0)
            d_x = col2im(d_cols.reshape(c, kh, kw, n, oh, ow), xp.shape, stride, dilation, pads)
        return (d_x, d_weight, d_bias)

    parents = (x, weight) if bias is None else (x, weight, bias)
    out = make_result(result, parents, backward)
    _trace.record(
        "Conv",
        [x, weight, bias],
        out,
        kernel_shape=[kh, kw],
        strides=list(stride),
        pads=[top, left, bottom, right],
        dilations=list(dilation),
        group=group,
    )
    return out


def col2im(
    d_cols: np.ndarray,
    padded_shape: tuple[int, ...],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    pads: Pads,
) -> np.ndarray:
    """Scatter-add ``(C, kh, kw, N, OH, OW)`` column gradients back onto the (unpadded) input."""
    c, kh, kw, n, oh, ow = d_cols.shape
    d_xp = np.zeros((c, n, padded_shape[2], padded_shape[3]), dtype=d_cols.dtype)
    for i in range(kh):
        rows = tap(i, dilation[0], stride[0], oh)
        for j in range(kw):
            d_xp[:, :, rows, tap(j, dilation[1], stride[1], ow)] += d_cols[:, i, j]
    top, bottom, left, right = pads
    return d_xp.transpose(1, 0, 2, 3)[:, :, top : padded_shape[2] - bottom, left : padded_shape[3] - right]
