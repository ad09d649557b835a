"""Col2Im: rearrange column blocks back into an image, summing where blocks overlap.

https://onnx.ai/onnx/operators/onnx__Col2Im.html

input ``(N, C * prod(block_shape), L)`` with L the number of sliding-block positions;
output ``(N, C, *image_shape)``. The inverse layout of im2col (but a sum, not an inverse).
"""

from __future__ import annotations

import itertools

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops._conv_common import pad_input
from lite.ops.registry import kernel


@kernel("Col2Im", since=18)
def Col2Im(input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    x = np.asarray(input)
    image = [int(v) for v in np.asarray(image_shape)]
    block = [int(v) for v in np.asarray(block_shape)]
    rank = len(image)
    dilations = dilations or [1] * rank
    strides = strides or [1] * rank
    pads = pads or [0] * (2 * rank)
    begin, end = pads[:rank], pads[rank:]
    padded = [n + b + e for n, b, e in zip(image, begin, end)]
    blocks = [(p - ((k - 1) * d + 1)) // s + 1 for p, k, d, s in zip(padded, block, dilations, strides)]
    batch = x.shape[0]
    taps = int(np.prod(block))
    if x.ndim != 3 or x.shape[1] % taps or x.shape[2] != int(np.prod(blocks)):
        raise UnsupportedOpError(
            f"Col2Im: input shape {x.shape} does not match block_shape {block} and {int(np.prod(blocks))} "
            f"block positions for image_shape {image}"
        )
    channels = x.shape[1] // taps
    columns = x.reshape(batch, channels, taps, *blocks)
    y = np.zeros((batch, channels, *padded), dtype=x.dtype)
    for index, offset in enumerate(itertools.product(*(range(k) for k in block))):
        region = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, s, n in zip(offset, dilations, strides, blocks)
        )
        y[(slice(None), slice(None)) + region] += columns[:, :, index]
    return pad_input(y, [-b for b in begin], [-e for e in end])
