"""A model whose constants float16 cannot hold, for the half-precision compute tests (CPU and CUDA)."""

from __future__ import annotations

import numpy as np

from lite.format import GraphBuilder, to_bytes


def norm_then_masked_softmax() -> bytes:
    """x [2, 4] -> a decomposed LayerNorm with a 1e-12 epsilon -> plus a mask of float32's lowest
    value everywhere -> Softmax -> y: flushed to float16, the epsilon gives 0/0 on a constant row
    and the mask -inf on every row, both NaN."""
    b = GraphBuilder("clamp", opset=17)
    x = b.input("x", np.float32, [2, 4])
    centred = b.node("Sub", [x, b.node("ReduceMean", [x], axes=[-1], keepdims=1)])
    variance = b.node("ReduceMean", [b.node("Mul", [centred, centred])], axes=[-1], keepdims=1)
    epsilon = b.constant("epsilon", np.array(1e-12, np.float32))
    normed = b.node("Div", [centred, b.node("Sqrt", [b.node("Add", [variance, epsilon])])])
    mask = b.constant("mask", np.full((2, 4), np.finfo(np.float32).min, np.float32))
    y = b.node("Softmax", [b.node("Add", [normed, mask])], outputs=["y"], axis=-1)
    b.output(y, np.float32, [2, 4])
    return to_bytes(b.build())
