"""DepthToSpace and SpaceToDepth: move ``blocksize x blocksize`` blocks between the channel
axis and the spatial axes of an NCHW tensor.

Specs: https://onnx.ai/onnx/operators/onnx__DepthToSpace.html, onnx__SpaceToDepth.html.

``mode`` orders the channel axis as depth-column-row (``DCR``, the default) or
column-row-depth (``CRD``). DepthToSpace has it from opset 11 (DCR only before); SpaceToDepth
from opset 28. Both are a reshape to 6-D, a transpose and a reshape back::

    DepthToSpace DCR: [N, b, b, C', H, W] --(0, 3, 4, 1, 5, 2)--> [N, C', H, b, W, b]
    DepthToSpace CRD: [N, C', b, b, H, W] --(0, 1, 4, 2, 5, 3)--> [N, C', H, b, W, b]
    SpaceToDepth DCR: [N, C, H', b, W', b] --(0, 3, 5, 1, 2, 4)--> [N, b, b, C, H', W']
    SpaceToDepth CRD: [N, C, H', b, W', b] --(0, 1, 3, 5, 2, 4)--> [N, C, b, b, H', W']
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.registry import kernel


def _check(op_type: str, input: np.ndarray, blocksize: int, mode: str) -> None:
    if input.ndim != 4:
        raise KernelError(f"{op_type}: the input must be 4-D (NCHW), got shape {input.shape}")
    if blocksize is None or blocksize < 1:
        raise KernelError(f"{op_type}: blocksize must be a positive integer, got {blocksize}")
    if mode not in ("DCR", "CRD"):
        raise UnsupportedOpError(f"{op_type}: mode must be 'DCR' or 'CRD', got {mode!r}")


@kernel("DepthToSpace", since=1)
def DepthToSpace(input, *, blocksize=None, mode="DCR"):
    input = np.asarray(input)
    _check("DepthToSpace", input, blocksize, mode)
    n, c, h, w = input.shape
    b = blocksize
    if c % (b * b):
        raise KernelError(f"DepthToSpace: {c} channels are not divisible by blocksize^2 = {b * b}")
    depth = c // (b * b)
    if mode == "DCR":
        blocks = input.reshape(n, b, b, depth, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = input.reshape(n, depth, b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(n, depth, h * b, w * b)


@kernel("SpaceToDepth", since=1)
def SpaceToDepth(input, *, blocksize=None, mode="DCR"):
    input = np.asarray(input)
    _check("SpaceToDepth", input, blocksize, mode)
    n, c, h, w = input.shape
    b = blocksize
    if h % b or w % b:
        raise KernelError(f"SpaceToDepth: spatial size {h}x{w} is not divisible by blocksize {b}")
    blocks = input.reshape(n, c, h // b, b, w // b, b)
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return blocks.transpose(order).reshape(n, c * b * b, h // b, w // b)
