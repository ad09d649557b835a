"""QLinearConv: quantized convolution, requantized to the output's scale and zero point.

https://onnx.ai/onnx/operators/onnx__QLinearConv.html

y = saturate(round((conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp),
with ``w_scale``/``w_zero_point`` per tensor or per output channel and ``B`` int32.
"""

from __future__ import annotations

import numpy as np

from lite.ops._quant_common import centered, requantize
from lite.ops.conv import Conv
from lite.ops.conv_integer import prepare_integer_conv
from lite.ops.registry import kernel


def prepare_qlinear_conv(constants, shapes, **_):
    """Load-time work: the constant w centred once, with a constant bias (see lite.ops.conv_integer)."""
    values = (list(constants) + [None] * 9)[:9]
    bias = None if values[8] is None else np.asarray(values[8]).astype(np.float64)
    # A B computed at run time (or named empty) is passed on each call: only its absence is known.
    return prepare_integer_conv(values[3], values[5], bias, bias_known=bias is not None or len(constants) < 9)


@kernel("QLinearConv", since=10, prepare=prepare_qlinear_conv)
def QLinearConv(
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    B=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
    prepared=None,
):
    attributes = {"auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape,
                  "pads": pads, "strides": strides}
    bias = B if B is None else np.asarray(B).astype(np.float64)
    if prepared is not None and prepared.serves(w_zero_point):
        accumulated = Conv(centered(x, x_zero_point), prepared.conv.weights, bias, prepared=prepared.conv, **attributes)
    else:
        accumulated = Conv(centered(x, x_zero_point), centered(w, w_zero_point, axis=0), bias, **attributes)
    # The multiplier is formed in the scales' own precision (float32), as the spec's reference does.
    multiplier = np.asarray(x_scale) * np.asarray(w_scale) / np.asarray(y_scale)
    if multiplier.ndim == 1 and multiplier.size > 1:
        multiplier = multiplier.reshape((-1,) + (1,) * (accumulated.ndim - 2))
    dtype = np.asarray(y_zero_point if y_zero_point is not None else x).dtype
    return requantize(np.rint(accumulated), multiplier, y_zero_point, dtype)
