"""Lowerings of the network ops: convolutions, matrix products, pooling, normalization.

Geometry follows https://onnx.ai/onnx/operators/onnx__Conv.html and onnx__MaxPool.html, as the
numpy kernels implement it (lite/ops/_conv_common.py): ``auto_pad`` resolved to begin/end pads;
asymmetric pads (which torch's ops do not take) applied with ``F.pad`` first; with ``ceil_mode``
the last window must start inside the input or its left padding.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from lite.engines.torch.ops._values import to_tensor
from lite.engines.torch.ops.elementwise import activate
from lite.engines.torch.ops.registry import lowering

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _defaults(rank: int, kernel_shape, strides, dilations) -> tuple[list[int], list[int], list[int]]:
    return list(kernel_shape), list(strides or [1] * rank), list(dilations or [1] * rank)


def _resolve_pads(auto_pad: str, pads, spatial, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(begin, end) pads per spatial axis, per ``auto_pad``."""
    rank = len(spatial)
    if auto_pad in ("NOTSET", ""):
        pads = list(pads) if pads else [0] * (2 * rank)
        return pads[:rank], pads[rank:]
    if auto_pad == "VALID":
        return [0] * rank, [0] * rank
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return begin, end


def _torch_pad(begin, end) -> list[int]:
    """F.pad's argument: (last axis begin, end, previous axis begin, end, ...)."""
    flat = []
    for b, e in zip(reversed(begin), reversed(end)):
        flat += [b, e]
    return flat


def _check_auto_pad(attributes: dict[str, Any]) -> str | None:
    auto_pad = attributes.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad {auto_pad!r}"
    return None


@lowering("Conv", check=_check_auto_pad)
def Conv(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
         fused_activation=None):
    rank = W.dim() - 2
    kernel, strides, dilations = _defaults(rank, kernel_shape or W.shape[2:], strides, dilations)
    begin, end = _resolve_pads(auto_pad, pads, X.shape[2:], kernel, strides, dilations)
    if begin != end:
        X = F.pad(X, _torch_pad(begin, end))
        begin = [0] * rank
    bias = None if B is None else to_tensor(B, X)
    return activate(_CONV[rank](X, W, bias, strides, begin, dilations, group), fused_activation)


@lowering("ConvTranspose", check=_check_auto_pad)
def ConvTranspose(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                  output_padding=None, output_shape=None, pads=None, strides=None, fused_activation=None):
    rank = W.dim() - 2
    kernel, strides, dilations = _defaults(rank, kernel_shape or W.shape[2:], strides, dilations)
    spatial = list(X.shape[2:])
    extra = list(output_padding or [0] * rank)
    full = [(n - 1) * s + (k - 1) * d + 1 for n, s, k, d in zip(spatial, strides, kernel, dilations)]
    if output_shape:
        wanted = list(output_shape)[-rank:]
        total = [f + o - w for f, o, w in zip(full, extra, wanted)]
        split = [(t // 2, t - t // 2) for t in total]
        upper = auto_pad == "SAME_UPPER"  # the spec puts the odd pad at the start unless SAME_UPPER
        begin = [small if upper else large for small, large in split]
        end = [large if upper else small for small, large in split]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [f + o - n * s for f, o, n, s in zip(full, extra, spatial, strides)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin)]
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    else:
        pads = list(pads or [0] * (2 * rank))
        begin, end = pads[:rank], pads[rank:]
    bias = None if B is None else to_tensor(B, X)
    native = begin == end and all(min(b, 0) == 0 for b in begin) and all(
        o < max(s, d) for o, s, d in zip(extra, strides, dilations))
    if native:
        y = _CONV_TRANSPOSE[rank](X, W, bias, strides, begin, extra, group, dilations)
        return activate(y, fused_activation)
    # General case: the full transposed convolution, the output padding, then the crop.
    y = _CONV_TRANSPOSE[rank](X, W, None, strides, 0, 0, group, dilations)
    y = F.pad(y, _torch_pad([0] * rank, extra))
    index = [slice(None), slice(None)] + [slice(b, size + o - e)
                                          for b, e, size, o in zip(begin, end, full, extra)]
    y = y[tuple(index)]
    if bias is not None:
        y = y + bias.reshape([1, -1] + [1] * rank)
    return activate(y, fused_activation)


@lowering("Gemm")
def Gemm(A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, fused_activation=None):
    a = A.t() if transA else A
    if C is None or beta == 0:
        y = torch.matmul(a, B.t() if transB else B)
        y = y if alpha == 1 else y * alpha
    elif transB and alpha == 1 and beta == 1 and isinstance(C, torch.Tensor) and C.dim() == 1:
        y = F.linear(a, B, C)  # the fused bias path of Linear layers
    else:
        y = torch.addmm(to_tensor(C, a), a, B.t() if transB else B, beta=beta, alpha=alpha)
    return activate(y, fused_activation)


@lowering("MatMul")
def MatMul(A, B, *, fused_activation=None):
    return activate(torch.matmul(A, B), fused_activation)


@lowering("Einsum")
def Einsum(*inputs, equation):
    return torch.einsum(equation, *inputs)


# -- pooling -------------------------------------------------------------------------------------
def _pool_geometry(X, kernel_shape, strides, dilations, auto_pad, pads, ceil_mode):
    rank = X.dim() - 2
    kernel, strides, dilations = _defaults(rank, kernel_shape, strides, dilations)
    spatial = list(X.shape[2:])
    begin, end = _resolve_pads(auto_pad, pads, spatial, kernel, strides, dilations)
    out = []
    for size, k, s, d, b, e in zip(spatial, kernel, strides, dilations, begin, end):
        span = size + b + e - ((k - 1) * d + 1)
        if ceil_mode:
            length = -(-span // s) + 1
            if (length - 1) * s >= size + b:
                length -= 1
        else:
            length = span // s + 1
        out.append(length)
    overhang = [max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e))
                for o, s, k, d, n, b, e in zip(out, strides, kernel, dilations, spatial, begin, end)]
    return rank, kernel, strides, dilations, begin, end, overhang


def _native_padding(kernel, dilations, begin, end) -> bool:
    """torch's pooling pads symmetrically, at most half the (dilated) window."""
    return begin == end and all(2 * b <= (k - 1) * d + 1 for b, k, d in zip(begin, kernel, dilations))


def _lowest(dtype: torch.dtype) -> float:
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


@lowering("MaxPool", check=_check_auto_pad)
def MaxPool(X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None, storage_order=0,
            strides=None, output_count):
    rank, kernel, strides, dilations, begin, end, overhang = _pool_geometry(
        X, kernel_shape, strides, dilations, auto_pad, pads, ceil_mode)
    if _native_padding(kernel, dilations, begin, end):
        if output_count == 1:
            return _MAX_POOL[rank](X, kernel, strides, begin, dilations, bool(ceil_mode))
        y, indices = _MAX_POOL[rank](X, kernel, strides, begin, dilations, bool(ceil_mode), return_indices=True)
        return y, _onnx_indices(X, indices, storage_order)
    if output_count > 1:
        raise NotImplementedError("MaxPool Indices with asymmetric or large pads")
    padded = F.pad(X, _torch_pad(begin, [e + o for e, o in zip(end, overhang)]), value=_lowest(X.dtype))
    return _MAX_POOL[rank](padded, kernel, strides, 0, dilations, False)


def _onnx_indices(X: torch.Tensor, indices: torch.Tensor, storage_order: int) -> torch.Tensor:
    """torch's per-plane indices as ONNX's flat indices into the whole input."""
    spatial = list(X.shape[2:])
    plane = math.prod(spatial)
    if storage_order and len(spatial) == 2:
        height, width = spatial
        indices = (indices % width) * height + indices // width
    offsets = torch.arange(X.shape[0] * X.shape[1], device=X.device).reshape(X.shape[0], X.shape[1],
                                                                              *[1] * len(spatial))
    return indices + offsets * plane


def _check_average_pool(attributes: dict[str, Any]) -> str | None:
    if any(d != 1 for d in attributes.get("dilations") or []):
        return "dilated AveragePool"
    return _check_auto_pad(attributes)


@lowering("AveragePool", check=_check_average_pool)
def AveragePool(X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape, pads=None,
                strides=None):
    rank, kernel, strides, dilations, begin, end, overhang = _pool_geometry(
        X, kernel_shape, strides, dilations, auto_pad, pads, ceil_mode)
    if _native_padding(kernel, dilations, begin, end):
        return _AVG_POOL[rank](X, kernel, strides, begin, bool(ceil_mode), bool(count_include_pad))
    # Pad explicitly, sum each window, divide by the cells that count (real ones, or real + pads).
    pad = _torch_pad(begin, [e + o for e, o in zip(end, overhang)])
    area = math.prod(kernel)
    total = _AVG_POOL[rank](F.pad(X, pad), kernel, strides, 0, False, True) * area
    ones = torch.ones([1, 1, *X.shape[2:]], dtype=X.dtype, device=X.device)
    counted = F.pad(ones, pad, value=0.0)
    if count_include_pad:
        counted = F.pad(F.pad(ones, _torch_pad(begin, end), value=1.0), _torch_pad([0] * rank, overhang), value=0.0)
    divisor = _AVG_POOL[rank](counted, kernel, strides, 0, False, True) * area
    return total / divisor


@lowering("GlobalAveragePool")
def GlobalAveragePool(X):
    return X.mean(dim=tuple(range(2, X.dim())), keepdim=True)


@lowering("GlobalMaxPool")
def GlobalMaxPool(X):
    return X.amax(dim=tuple(range(2, X.dim())), keepdim=True)


# -- normalization -------------------------------------------------------------------------------
def _check_inference(attributes: dict[str, Any]) -> str | None:
    return "BatchNormalization in training mode" if attributes.get("training_mode", 0) else None


@lowering("BatchNormalization", check=_check_inference)
def BatchNormalization(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, training_mode=0,
                       spatial=1):
    return F.batch_norm(X, input_mean, input_var, scale, B, False, 0.0, epsilon)


@lowering("InstanceNormalization")
def InstanceNormalization(input, scale, B, *, epsilon=1e-5):
    return F.instance_norm(input, weight=scale, bias=B, eps=epsilon)


@lowering("LayerNormalization")
def LayerNormalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1, output_count):
    axis = axis + X.dim() if axis < 0 else axis
    dims = tuple(range(axis, X.dim()))
    normalized = list(X.shape[axis:])
    if output_count == 1 and list(Scale.shape) == normalized and (B is None or list(B.shape) == normalized):
        return F.layer_norm(X, normalized, Scale, B, epsilon)
    # Scale/B broadcast to the normalized shape, or Mean/InvStdDev wanted: the formula itself,
    # in float32 as stash_type=1 asks.
    x = X.float() if stash_type == 1 else X
    mean = x.mean(dim=dims, keepdim=True)
    inv_std = torch.rsqrt((x - mean).pow(2).mean(dim=dims, keepdim=True) + epsilon)
    y = ((x - mean) * inv_std).to(X.dtype) * Scale
    if B is not None:
        y = y + B
    return (y, mean, inv_std)[:output_count] if output_count > 1 else y


@lowering("LRN", check=lambda attributes: None if attributes.get("size", 1) % 2 else "LRN with an even size")
def LRN(X, *, size, alpha=0.0001, beta=0.75, bias=1.0):
    return F.local_response_norm(X, size, alpha, beta, bias)
