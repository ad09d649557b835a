"""Differentiable ops on :class:`train.Tensor` (the ``mindspore.ops`` of this package).

Each op computes its forward with numpy, returns its backward as a closure next to it, and
records itself for ONNX export (:mod:`train._trace`).
"""

from train.ops.activation import dense, dropout, gelu, relu, relu6, sigmoid, tanh
from train.ops.array import concat, flatten, getitem, reshape, transpose
from train.ops.conv import conv2d, resolve_pads
from train.ops.custom import Custom
from train.ops.loss import l1, mse, softmax_cross_entropy
from train.ops.math import (
    add,
    as_tensor,
    cast,
    div,
    erf,
    exp,
    log,
    matmul,
    mul,
    neg,
    power,
    reduce_mean,
    reduce_sum,
    sqrt,
    sub,
)
from train.ops.normalization import batch_norm
from train.ops.pooling import avg_pool2d, global_avg_pool2d, max_pool2d

__all__ = [
    "Custom",
    "add",
    "as_tensor",
    "avg_pool2d",
    "batch_norm",
    "cast",
    "concat",
    "conv2d",
    "dense",
    "div",
    "dropout",
    "erf",
    "exp",
    "flatten",
    "gelu",
    "getitem",
    "global_avg_pool2d",
    "l1",
    "log",
    "matmul",
    "max_pool2d",
    "mse",
    "mul",
    "neg",
    "power",
    "reduce_mean",
    "reduce_sum",
    "relu",
    "relu6",
    "reshape",
    "resolve_pads",
    "sigmoid",
    "softmax_cross_entropy",
    "sqrt",
    "sub",
    "tanh",
    "transpose",
]
