"""ConvInteger: convolution of integer tensors with zero points, accumulated in int32.

https://onnx.ai/onnx/operators/onnx__ConvInteger.html
"""

from __future__ import annotations

from lite.ops._quant_common import centered, to_int32
from lite.ops.conv import Conv
from lite.ops.registry import kernel


@kernel("ConvInteger", since=10)
def ConvInteger(
    x,
    w,
    x_zero_point=None,
    w_zero_point=None,
    *,
    auto_pad="NOTSET",
    dilations=None,
    group=1,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    """Y (int32) = conv(x - x_zero_point, w - w_zero_point); padding contributes zero."""
    accumulated = Conv(
        centered(x, x_zero_point),
        centered(w, w_zero_point, axis=0),
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )
    return to_int32(accumulated)
