"""Upsample (deprecated since opset 10): Resize-10's semantics with scales as an attribute (7) or input (9).

https://onnx.ai/onnx/operators/onnx__Upsample.html
"""

from __future__ import annotations

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel
from lite.ops.resize import resize_opset10


@kernel("Upsample", since=7)
def Upsample_7(X, *, mode="nearest", scales=None):
    if scales is None:
        raise UnsupportedOpError("Upsample-7: the scales attribute is required")
    return resize_opset10(X, scales, mode)


@kernel("Upsample", since=9)
def Upsample(X, scales, *, mode="nearest"):
    return resize_opset10(X, scales, mode)
