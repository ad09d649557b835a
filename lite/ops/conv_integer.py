"""ConvInteger: convolution of integer tensors with zero points, accumulated in int32.

https://onnx.ai/onnx/operators/onnx__ConvInteger.html

A constant w is centred on its zero point and widened to float64 once at load (``prepare``),
not on every call, and the float Conv's per-shape layers are kept with it; float64 products of
8-bit integers are exact (see lite.ops._quant_common). No Winograd transform: its fractions
would not keep the integers exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.ops._quant_common import centered, to_int32
from lite.ops.conv import Conv, PreparedConv
from lite.ops.registry import kernel


@dataclass(frozen=True)
class PreparedIntegerConv:
    """The centred constant weights (and float64 bias) in a PreparedConv, with the zero point
    they were centred on."""

    conv: PreparedConv
    zero_point: np.ndarray | None

    def serves(self, zero_point) -> bool:
        if (zero_point is None) != (self.zero_point is None):
            return False
        return zero_point is None or np.array_equal(zero_point, self.zero_point)


def prepare_integer_conv(w, w_zero_point, bias=None, bias_known=True) -> PreparedIntegerConv | None:
    """Load-time work for a constant integer weight of at least one spatial axis."""
    if not isinstance(w, np.ndarray) or w.ndim < 3 or w.dtype.kind not in "iu":
        return None
    weights = centered(w, w_zero_point, axis=0)
    zero = None if w_zero_point is None else np.array(w_zero_point)
    return PreparedIntegerConv(PreparedConv(weights, bias, bias_known, None), zero)


def prepare_conv_integer(constants, shapes, **_):
    _, w, _, w_zero_point = (list(constants) + [None] * 4)[:4]
    return prepare_integer_conv(w, w_zero_point)


@kernel("ConvInteger", since=10, prepare=prepare_conv_integer)
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
    prepared=None,
):
    """Y (int32) = conv(x - x_zero_point, w - w_zero_point); padding contributes zero."""
    attributes = {"auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape,
                  "pads": pads, "strides": strides}
    if prepared is not None and prepared.serves(w_zero_point):
        return to_int32(Conv(centered(x, x_zero_point), prepared.conv.weights, prepared=prepared.conv, **attributes))
    return to_int32(Conv(centered(x, x_zero_point), centered(w, w_zero_point, axis=0), **attributes))
