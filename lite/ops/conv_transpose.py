"""ConvTranspose: the gradient of Conv with respect to its input, as a forward op.

https://onnx.ai/onnx/operators/onnx__ConvTranspose.html

One GEMM per group turns every input pixel into its ``(M/g, *kernel)`` contribution
(``W^T @ X``); col2im then adds each kernel tap's plane into the strided output positions
it lands on, one strided add per tap. Pads crop the full output; a negative pad (from
``output_shape`` larger than the natural size) extends it with zeros.
"""

from __future__ import annotations

import itertools

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._conv_common import compute_dtype, pad_input, spatial_defaults
from lite.ops.registry import kernel


@kernel("ConvTranspose", since=1)
def ConvTranspose(
    X,
    W,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    output_padding=None,
    output_shape=None,
    pads=None,
    strides=None,
):
    """Y = conv_transpose(X, W) + B, X ``(N, C, *spatial)``, W ``(C, M/group, *kernel)``."""
    dtype = compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    w = np.asarray(W, dtype=dtype)
    batch, channels = x.shape[:2]
    if x.ndim < 3 or w.ndim != x.ndim or w.shape[0] != channels or channels % group:
        raise UnsupportedOpError(
            f"ConvTranspose: input {x.shape} and weight {w.shape} do not match for group={group} "
            "(expected X (N, C, ...), W (C, M/group, ...) with C divisible by group)"
        )
    spatial = x.shape[2:]
    rank = len(spatial)
    kernel_dims, strides, dilations = spatial_defaults(
        "ConvTranspose", spatial, kernel_shape if kernel_shape else w.shape[2:], strides, dilations
    )
    output_padding = [0] * rank if not output_padding else [int(p) for p in output_padding]
    # The full (uncropped) output: every tap of every input pixel lands inside it.
    full = [
        s * (n - 1) + (k - 1) * d + 1 + p
        for n, k, s, d, p in zip(spatial, kernel_dims, strides, dilations, output_padding)
    ]
    begin, end = _pads(auto_pad, pads, output_shape, spatial, strides, full, rank)

    per_group_out = w.shape[1]
    in_per_group = channels // group
    taps = list(itertools.product(*(range(k) for k in kernel_dims)))
    pixels = int(np.prod(spatial))
    # (group, M/g * taps, C/g) @ (N, group, C/g, pixels) -> (N, group, M/g * taps, pixels)
    weights = w.reshape(group, in_per_group, per_group_out * len(taps)).transpose(0, 2, 1)
    cols = np.matmul(weights, x.reshape(batch, group, in_per_group, pixels))
    cols = cols.reshape(batch, group * per_group_out, len(taps), *spatial)

    y = np.zeros((batch, group * per_group_out, *full), dtype=dtype)
    for index, tap in enumerate(taps):
        region = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, s, n in zip(tap, dilations, strides, spatial)
        )
        y[(slice(None), slice(None)) + region] += cols[:, :, index]
    y = pad_input(y, [-b for b in begin], [-e for e in end])
    if B is not None:
        y = y + np.asarray(B, dtype=dtype).reshape((-1,) + (1,) * rank)
    return y.astype(X.dtype, copy=False)


def _pads(auto_pad, pads, output_shape, spatial, strides, full, rank):
    """Crop at the (begin, end) of each axis, per the spec's output_shape / auto_pad rules."""
    if output_shape is not None:
        target = [int(v) for v in output_shape][-rank:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [n * s for n, s in zip(spatial, strides)]
    else:
        if auto_pad not in ("NOTSET", "", "VALID"):
            raise UnsupportedOpError(
                f"ConvTranspose: auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}"
            )
        pads = [0] * (2 * rank) if not pads or auto_pad == "VALID" else [int(p) for p in pads]
        return pads[:rank], pads[rank:]
    begin, end = [], []
    for size, want in zip(full, target):
        total = size - want
        if auto_pad == "SAME_UPPER":
            begin.append(total // 2)
            end.append(total - total // 2)
        else:
            begin.append(total - total // 2)
            end.append(total // 2)
    return begin, end
