"""FusedConv (com.microsoft): Conv (+ Z) then an activation, as ONNX Runtime's graph optimizer
fuses them (its "extended" level, in models saved with ``optimized_model_filepath``).

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.FusedConv

``Y = activation(Conv(X, W, B) (+ Z))``: ``activation`` is Relu, Tanh, Sigmoid, LeakyRelu
(alpha), Clip (min, max) or HardSigmoid (alpha, beta), ``activation_params`` its parameters in
that order, the vocabulary of lite's own fused activations (lite.format.fused_activation).
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops import fused_activation
from lite.ops.conv import Conv
from lite.ops.registry import kernel


@kernel("FusedConv", since=1, domain="com.microsoft")
def FusedConv(X, W, B=None, Z=None, *, activation, activation_params=None, auto_pad="NOTSET", dilations=None,
              group=1, kernel_shape=None, pads=None, strides=None, allocate=np.empty):
    params = tuple(activation_params or ())
    reason = fused_activation.check(activation, params)
    if reason:
        raise UnsupportedOpError(f"FusedConv: {reason}")
    attributes = {"auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape,
                  "pads": pads, "strides": strides}
    if Z is None:
        return Conv(X, W, B, **attributes, fused_activation=(activation, params), allocate=allocate)
    return fused_activation.apply(np.add(Conv(X, W, B, **attributes, allocate=allocate), Z), activation, params)
