"""Depthwise convolution, channels-first, of any rank and with channel multipliers: each tap one
contiguous slice of a stride-phase buffer, multiplied and added over a block of channels.

https://onnx.ai/onnx/operators/onnx__Conv.html. The general depthwise path beside the 2-D
channels-last one (:mod:`lite.ops._depthwise`, MobileNet's layers): it serves 1-D and 3-D
convolutions and multipliers above one, and it shares only the scratch budget with that path.
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops._conv_common import TapPlan
from lite.ops._depthwise import _DEPTHWISE_SCRATCH_ELEMENTS
from lite.ops._layout import is_channels_last


def depthwise_taps(x, w, begin, end, strides, dilations, out_shape, allocate, finish=None):
    """Blocks of channels; in each, every tap is one contiguous slice (``TapPlan``) and costs a
    multiply and an add over the whole block. Each finished block is cropped into the output and
    gets its bias and activation (``finish(block, first channel, stop channel)``) while still in
    cache."""
    if is_channels_last(x):
        x = np.ascontiguousarray(x)
    batch, channels = x.shape[:2]
    multiplier = w.shape[0] // channels
    taps = math.prod(w.shape[2:])
    y = allocate((batch, channels * multiplier, math.prod(out_shape)), x.dtype)
    # (taps, C, multiplier, 1): one broadcastable weight column per tap.
    weights = np.ascontiguousarray(w.reshape(channels, multiplier, taps).transpose(2, 0, 1))[..., None]
    # The grid length depends only on the geometry: one channel's plan sizes the blocks.
    length = TapPlan(x[:1, :1], begin, end, w.shape[2:], strides, dilations, out_shape, 0).length
    phases = math.prod(min(s, (k - 1) * d + 1) for s, k, d in zip(strides, w.shape[2:], dilations))
    block = max(1, min(channels, _DEPTHWISE_SCRATCH_ELEMENTS // ((phases + 2) * length * multiplier)))
    for start in range(0, channels, block):
        stop = min(start + block, channels)
        plan = TapPlan(x[:, start:stop], begin, end, w.shape[2:], strides, dilations, out_shape, 0, allocate)
        acc = allocate((stop - start, multiplier, plan.length), x.dtype)
        spare = allocate((stop - start, multiplier, plan.length), x.dtype)
        for n in range(batch):
            for index, region in enumerate(plan.regions()):
                source = region[n, :, None, :]
                if index == 0:
                    np.multiply(source, weights[index, start:stop], out=acc)
                else:
                    np.multiply(source, weights[index, start:stop], out=spare)
                    acc += spare
            target = y[n, start * multiplier : stop * multiplier]
            np.copyto(target.reshape((-1,) + tuple(out_shape)), plan.crop(acc.reshape(-1, plan.length)))
            if finish is not None:
                finish(target, start * multiplier, stop * multiplier)
        del plan, acc, spare
    return y
