"""Layers: Conv2D, Conv2DTranspose, BiasAdd, BatchNorm, MatMul/BatchMatMul/MatMulExt, Dense,
MaxPool, AvgPool.

Semantics (MindSpore operator docs; ``mindspore/ops/operations/nn_ops.py`` and op yaml):

* ``Conv2D(x, w)``: ``pad_mode`` 'valid' (no padding), 'same' (output ``ceil(in/stride)``,
  total padding split with the extra row/column at the bottom/right, i.e. ONNX ``SAME_UPPER``),
  'pad' (``pad = (top, bottom, left, right)``; ONNX order is (top, left, bottom, right));
  ``stride``/``dilation`` are pairs or 4-tuples laid out like the data format; ``group``;
  NHWC data keeps its weight as (out, kh, kw, in/group).
* ``Conv2DTranspose(dout, w, input_size)`` (``Conv2DBackpropInput``) is the gradient of a Conv2D
  whose input has the shape ``input_size`` and whose output is ``dout``: ONNX ConvTranspose with
  that Conv2D's pads (``pad_list``, or for 'same' the SAME_UPPER split of the padding the forward
  convolution needed) and ``output_padding`` = ``input_size`` − the size those give. ``w`` is
  (C of dout, out/group, kh, kw), ONNX's layout. Only NCHW (MindSpore's CPU backend refuses NHWC).
* ``BiasAdd(x, b, data_format)``: ``b`` is added along the channel axis (1 for NCHW, last for NHWC).
* ``BatchNorm(x, scale, bias, mean, variance, is_training, epsilon, momentum, data_format)``:
  inference form ``scale·(x−mean)/sqrt(variance+epsilon)+bias``; returns a 5-tuple whose item 0
  is the result (MindSpore reads it with TupleGetItem; momentum only matters in training).
* ``MatMul(a, b, transpose_a, transpose_b)`` is 2-D (ONNX Gemm); ``BatchMatMul`` transposes the
  last two axes; ``MatMulExt`` is numpy's ``matmul``; ``Dense(x, w, b)`` is ``x·wᵀ + b``.
* ``MaxPool``/``AvgPool(x, kernel_size, strides, pad_mode, data_format)``: 'same' pads as
  ``SAME_UPPER``; padded cells are excluded from averages (ONNX ``count_include_pad=0``).
"""

from __future__ import annotations

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import ConstValue, TensorValue, TranslationError, TupleValue, Value
from converter.mindspore.primitives._common import (
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    data_format,
    flag,
    int_tuple,
    pad_mode,
    spatial_pair,
)


def _to_nchw(call: PrimitiveCall, x: TensorValue, fmt: str) -> TensorValue:
    return x if fmt == "NCHW" else call.step("Transpose", [x], like=x, perm=list(NHWC_TO_NCHW))


def _from_nchw(call: PrimitiveCall, y: TensorValue, fmt: str) -> TensorValue:
    if fmt == "NCHW":
        return y
    return call.emit("Transpose", [y], perm=list(NCHW_TO_NHWC))


def _padding(call: PrimitiveCall, mode: str, pads: tuple[int, ...], same: tuple | None = None) -> dict:
    """``same``: (input spatial shape, kernel, strides, dilations) of a convolution, whose "same"
    padding is then written out where those are known: ONNX Runtime refuses auto_pad SAME with a
    dilation ("Dilation not supported for AutoPadType::SAME_UPPER")."""
    if mode == "same":
        explicit = _same_pads(*same) if same is not None else None
        return {"auto_pad": "SAME_UPPER"} if explicit is None else {"pads": explicit}
    if mode == "valid":
        return {"pads": [0, 0, 0, 0]}
    if len(pads) == 1:
        pads = pads * 4
    if len(pads) != 4 or any(p < 0 for p in pads):
        raise TranslationError(f"pad {pads} must be 4 non-negative ints (top, bottom, left, right)")
    top, bottom, left, right = pads
    return {"pads": [top, left, bottom, right]}


def _spatial(value: TensorValue, fmt: str) -> tuple | None:
    """(H, W) of an image or a kernel in ``fmt`` (a kernel is (O, I, H, W), or (O, H, W, I) in
    NHWC graphs), where its shape is known."""
    if value.shape is None or len(value.shape) != 4:
        return None
    return tuple(value.shape[2:]) if fmt == "NCHW" else tuple(value.shape[1:3])


def _same_pads(spatial, kernel, strides, dilations) -> list[int] | None:
    """ONNX's SAME_UPPER pads (extra at the end) for known sizes, as [begins..., ends...]; None
    where a size is unknown or no dilation asks for it (auto_pad then stays, as MindSpore wrote)."""
    if all(d == 1 for d in dilations) or spatial is None or kernel is None:
        return None
    if any(not isinstance(size, int) for size in (*spatial, *kernel)):
        return None
    return _same_split(spatial, kernel, strides, dilations)


def _same_split(spatial, kernel, strides, dilations) -> list[int]:
    """The padding a 'same' convolution of ``spatial`` needs, extra at the end, as [begins..., ends...]."""
    begins, ends = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations):
        out = -(-size // stride)
        total = max(0, (out - 1) * stride + (k - 1) * dilation + 1 - size)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return begins + ends


def conv2d(call: PrimitiveCall) -> Value:
    fmt = data_format(call.arg(None, "format", "data_format", default="NCHW"))
    spatial, kernel = _spatial(call.tensor(0), fmt), _spatial(call.tensor(1), fmt)
    x = _to_nchw(call, call.tensor(0), fmt)
    weight = call.tensor(1)
    if fmt == "NHWC":
        weight = call.step("Transpose", [weight], like=weight, perm=list(NHWC_TO_NCHW))
    mode = pad_mode(call.arg(None, "pad_mode", default="valid"))
    pads = int_tuple(call.arg(None, "pad", default=(0, 0, 0, 0)), "pad")
    stride = spatial_pair(call.arg(None, "stride", "strides", default=1), fmt, "stride")
    dilation = spatial_pair(call.arg(None, "dilation", default=1), fmt, "dilation")
    group = int(call.arg(None, "group", "groups", default=1))
    same = (spatial, kernel, stride, dilation)
    attrs = dict(strides=list(stride), dilations=list(dilation), group=group, **_padding(call, mode, pads, same))
    if fmt == "NCHW":
        return call.emit("Conv", [x, weight], **attrs)
    return _from_nchw(call, call.step("Conv", [x, weight], like=x, **attrs), fmt)


def conv2d_transpose(call: PrimitiveCall) -> Value:
    fmt = data_format(call.arg(None, "format", "data_format", default="NCHW"))
    if fmt != "NCHW":
        raise TranslationError("data format NHWC is not translated; export with the NCHW layout")
    x, weight = call.tensor(0), call.tensor(1)
    target = _input_size(call)
    spatial, kernel = _spatial(x, fmt), _spatial(weight, fmt)
    known = spatial is not None and kernel is not None and None not in (*spatial, *kernel)
    if not known or len(target) != 4:
        raise TranslationError("the shapes of the input, the weight and input_size must be known (4-D, NCHW)")
    stride = spatial_pair(call.arg(None, "stride", default=1), fmt, "stride")
    dilation = spatial_pair(call.arg(None, "dilation", default=1), fmt, "dilation")
    mode = pad_mode(call.arg(None, "pad_mode", default="valid"))
    if mode == "same":
        pads = _same_split(target[2:], kernel, stride, dilation)
    else:
        given = int_tuple(call.arg(None, "pad_list", "pad", default=(0, 0, 0, 0)), "pad_list")
        pads = _padding(call, mode, given)["pads"]
    output_padding = _output_padding(spatial, kernel, stride, dilation, pads, target[2:])
    group = int(call.arg(None, "group", "groups", default=1))
    attrs = dict(strides=list(stride), dilations=list(dilation), group=group, pads=pads)
    if any(output_padding):
        attrs["output_padding"] = output_padding
    dtype, shape = call.out()
    # A dynamic-batch export leaves the result's shape out; its rank is known (a BiasAdd reads it).
    return call.graph.add("ConvTranspose", [x, weight], call.base, dtype=dtype or x.dtype,
                          shape=shape or (None,) * 4, **attrs)


def _input_size(call: PrimitiveCall) -> tuple:
    """Conv2DTranspose's ``input_size``: a constant, or (a dynamic-batch export) ``Shape`` of a
    tensor whose batch is read at run time; only its height and width must be constants."""
    value = call.inputs[2] if len(call.inputs) > 2 else None
    if isinstance(value, TupleValue) and len(value.items) == 4 and all(
            isinstance(item, ConstValue) for item in value.items[2:]):
        return (None, None, *(int(item.value) for item in value.items[2:]))
    return int_tuple(call.arg(2, "input_size"), "input_size")


def _output_padding(spatial, kernel, stride, dilation, pads: list[int], wanted) -> list[int]:
    """How much ConvTranspose must add at the end of each axis to give ``wanted`` (MindSpore's
    ``input_size``): a strided Conv2D maps several input sizes to one output size."""
    extra = []
    for axis in range(2):
        size = (spatial[axis] - 1) * stride[axis] + (kernel[axis] - 1) * dilation[axis] + 1
        extra.append(wanted[axis] - (size - pads[axis] - pads[axis + 2]))
    if min(extra) < 0:
        raise TranslationError(f"input_size {tuple(wanted)} (H, W) is smaller than the transposed convolution gives")
    return extra


def bias_add(call: PrimitiveCall) -> Value:
    x, bias = call.tensor(0), call.tensor(1)
    fmt = data_format(call.arg(2, "data_format", "format", default="NCHW"))
    if fmt == "NHWC" or x.rank == 2:
        return call.emit("Add", [x, bias])
    if x.rank is None:
        raise TranslationError("the rank of input 0 is unknown (no 'shape' attribute); cannot place the bias")
    shape = [-1] + [1] * (x.rank - 2)
    array = call.graph.constant_of(bias)
    if array is not None:
        return call.emit("Add", [x, call.initializer(array.reshape(shape), "bias")])
    target = call.initializer(np.asarray(shape, np.int64), "bias_shape")
    return call.emit("Add", [x, call.step("Reshape", [bias, target], like=bias)])


def batch_norm(call: PrimitiveCall) -> Value:
    if flag(call.arg(5, "is_training", default=False), "is_training"):
        raise TranslationError(
            "is_training=True: the graph was exported in training mode; call net.set_train(False) before export"
        )
    epsilon = float(call.arg(6, "epsilon", default=1e-5))
    fmt = data_format(call.arg(8, "data_format", "format", default="NCHW"))
    x = _to_nchw(call, call.tensor(0), fmt)
    params = [call.tensor(i) for i in range(1, 5)]
    if fmt == "NCHW":
        y = call.emit("BatchNormalization", [x, *params], epsilon=epsilon)
    else:
        y = _from_nchw(call, call.step("BatchNormalization", [x, *params], like=x, epsilon=epsilon), fmt)
    # Items 1-4 (batch statistics, reserves) are only meaningful in training; inference reads item 0.
    items = (y, params[2], params[3], params[2], params[3])
    return TupleValue(items, primary=0)


def _transposed_last(call: PrimitiveCall, value: TensorValue, what: str) -> TensorValue:
    if value.rank is None:
        raise TranslationError(f"the rank of {what} is unknown (no 'shape' attribute); cannot transpose it")
    perm = list(range(value.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return call.step("Transpose", [value], like=value, perm=perm)


def mat_mul(call: PrimitiveCall) -> Value:
    a, b = call.tensor(0), call.tensor(1)
    transpose_a = flag(call.arg(2, "transpose_a", "transpose_x1", default=False), "transpose_a")
    transpose_b = flag(call.arg(3, "transpose_b", "transpose_x2", default=False), "transpose_b")
    if call.primitive == "MatMul" and a.rank == 2 and b.rank == 2:
        return call.emit("Gemm", [a, b], transA=int(transpose_a), transB=int(transpose_b))
    if transpose_a:
        a = _transposed_last(call, a, "input 0")
    if transpose_b:
        b = _transposed_last(call, b, "input 1")
    return call.emit("MatMul", [a, b])


def mat_mul_ext(call: PrimitiveCall) -> Value:
    return call.emit("MatMul", [call.tensor(0), call.tensor(1)])


def dense(call: PrimitiveCall) -> Value:
    x, weight = call.tensor(0), call.tensor(1)
    has_bias = len(call.inputs) > 2 and not (isinstance(call.inputs[2], ConstValue) and call.inputs[2].value is None)
    bias = call.tensor(2) if has_bias else None
    if x.rank == 2 and weight.rank == 2:
        return call.emit("Gemm", [x, weight, bias], transB=1)
    if weight.rank == 1:  # Dense with a 1-D weight is a dot product over the last axis
        product = call.step("MatMul", [x, weight], like=x)
    else:
        product = call.step("MatMul", [x, _transposed_last(call, weight, "the weight")], like=x)
    return call.emit("Add", [product, bias]) if bias is not None else call.emit("Identity", [product])


def _pool(call: PrimitiveCall, op_type: str) -> Value:
    fmt = data_format(call.arg(4, "data_format", "format", default="NCHW"))
    kernel = spatial_pair(call.arg(1, "kernel_size", "ksize"), fmt, "kernel_size")
    strides = spatial_pair(call.arg(2, "strides", "stride", default=kernel), fmt, "strides")
    mode = pad_mode(call.arg(3, "pad_mode", default="valid"))
    pads = int_tuple(call.arg(None, "pad_list", "pad", default=(0, 0, 0, 0)), "pad")
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), **_padding(call, mode, pads))
    if op_type == "AveragePool":
        attrs["count_include_pad"] = 0
    x = _to_nchw(call, call.tensor(0), fmt)
    if fmt == "NCHW":
        return call.emit(op_type, [x], **attrs)
    return _from_nchw(call, call.step(op_type, [x], like=x, **attrs), fmt)


def max_pool(call: PrimitiveCall) -> Value:
    return _pool(call, "MaxPool")


def avg_pool(call: PrimitiveCall) -> Value:
    return _pool(call, "AveragePool")


TABLE = {
    "Conv2D": conv2d,
    "Conv2DTranspose": conv2d_transpose,
    "BiasAdd": bias_add,
    "BatchNorm": batch_norm,
    "MatMul": mat_mul,
    "BatchMatMul": mat_mul,
    "MatMulExt": mat_mul_ext,
    "Dense": dense,
    "MaxPool": max_pool,
    "AvgPool": avg_pool,
}
