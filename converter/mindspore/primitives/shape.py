"""Shape and type ops: Reshape, Flatten, Transpose, Squeeze, ExpandDims, Concat, Cast,
reductions, StridedSlice, Gather, GatherD and ReverseV2.

* ``Reshape(x, shape)``: -1 infers one dimension; 0 is a real zero-sized dimension (so the ONNX
  Reshape gets ``allowzero=1`` when a 0 appears).
* ``Flatten(x)`` keeps axis 0 and flattens the rest (ONNX Flatten axis=1).
* ``Transpose(x, perm)``, ``Concat(tuple, axis)``, ``ExpandDims(x, axis)`` (ONNX Unsqueeze),
  ``Squeeze(x, axis)`` (an empty axis tuple squeezes every size-1 axis).
* ``Cast(x, dtype)``: the target is a dtype value or a MindSpore TypeId (``kNumberTypeFloat32=43``).
* ``ReduceMean``/``ReduceSum``/``ReduceMax``/``ReduceMin(x, axis, keep_dims)`` and the 2.x
  ``MeanExt``/``SumExt(x, dim, keepdim, dtype)``: an empty axis tuple or None reduces every axis.
  ``ReduceSum``'s ``skip_mode=True`` with an empty axis is the identity.
* ``StridedSlice(x, begin, end, strides, begin_mask, end_mask, ellipsis_mask, new_axis_mask,
  shrink_axis_mask)``: a set bit ``i`` of ``begin_mask``/``end_mask`` ignores begin/end on axis i;
  ``shrink_axis_mask`` drops axis i after taking index ``begin[i]``. Ellipsis and new-axis masks
  are not translated.
* ``Gather(x, indices, axis, batch_dims)``: ``x.shape[:axis] + indices.shape[batch_dims:] +
  x.shape[axis+1:]``; the first ``batch_dims`` axes of ``x`` and ``indices`` are paired (ONNX
  Gather for ``batch_dims=0``; GatherND with ``batch_dims``, between Transposes that bring ``axis``
  next to the batch axes and back, otherwise). Out-of-range indices, which MindSpore's CPU kernel
  answers with zeros, are an error at run time.
* ``GatherD(x, dim, index)`` (``ops.gather_elements``): ``out[i][j] = x[i][index[i][j]]`` along
  ``dim``, ONNX GatherElements.
* ``ReverseV2(x, axis)`` reverses the listed axes (a Slice with step -1; ``nn.LSTM`` writes it
  for the backward direction).
"""

from __future__ import annotations

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import TensorValue, TranslationError, TupleValue, Value
from converter.mindspore.primitives._common import axes, flag, int_tuple, onnx_type
from converter.mindspore.values import TYPE_IDS, DType

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def _ints(call: PrimitiveCall, values, suffix: str) -> TensorValue:
    return call.initializer(np.asarray(values, dtype=np.int64), suffix)


def reshape(call: PrimitiveCall) -> Value:
    target = int_tuple(call.arg(1, "shape"), "shape")
    attrs = {"allowzero": 1} if 0 in target else {}
    return call.emit("Reshape", [call.tensor(0), _ints(call, target, "shape")], **attrs)


def flatten(call: PrimitiveCall) -> Value:
    return call.emit("Flatten", [call.tensor(0)], axis=1)


def transpose(call: PrimitiveCall) -> Value:
    perm = int_tuple(call.arg(1, "perm", "input_perm"), "perm")
    return call.emit("Transpose", [call.tensor(0)], perm=list(perm))


def squeeze(call: PrimitiveCall) -> Value:
    chosen = axes(call.arg(1, "axis", default=()))
    inputs = [call.tensor(0)]
    if chosen:
        inputs.append(_ints(call, chosen, "axes"))
    return call.emit("Squeeze", inputs)


def expand_dims(call: PrimitiveCall) -> Value:
    axis = int_tuple(call.arg(1, "axis"), "axis")
    return call.emit("Unsqueeze", [call.tensor(0), _ints(call, axis, "axes")])


def concat(call: PrimitiveCall) -> Value:
    first = call.inputs[0] if call.inputs else None
    if isinstance(first, TupleValue):
        from converter.mindspore.call import to_tensor

        parts = [to_tensor(call.graph, item, f"{call.base}/const") for item in first.items]
        axis_index = 1
    else:  # 1.x writers may pass the tensors directly
        parts = [call.tensor(i) for i in range(len(call.inputs)) if not _is_axis_input(call, i)]
        axis_index = len(parts)
    axis = int_tuple(call.arg(axis_index, "axis", default=0), "axis")
    if len(axis) != 1:
        raise TranslationError(f"axis {axis} must be one int")
    return call.emit("Concat", parts, axis=axis[0])


def _is_axis_input(call: PrimitiveCall, index: int) -> bool:
    from converter.mindspore.graph import ConstValue

    value = call.inputs[index]
    return isinstance(value, ConstValue) and isinstance(value.value, (int, np.integer))


def cast(call: PrimitiveCall) -> Value:
    target = call.arg(1, "dst_type", "dtype", "to")
    if isinstance(target, DType):
        dtype = target.dtype
    elif isinstance(target, (int, np.integer)) and int(target) in TYPE_IDS:
        dtype = TYPE_IDS[int(target)]
    else:
        raise TranslationError(f"target type {target!r} is not a dtype MindSpore's Cast can name here")
    return call.emit("Cast", [call.tensor(0)], to=onnx_type(dtype))


REDUCTIONS = {
    "ReduceMean": "ReduceMean",
    "MeanExt": "ReduceMean",
    "ReduceSum": "ReduceSum",
    "SumExt": "ReduceSum",
    "ReduceMax": "ReduceMax",
    "ReduceMin": "ReduceMin",
}


def reduce(call: PrimitiveCall) -> Value:
    chosen = axes(call.arg(1, "axis", "dim", default=()))
    keep = flag(call.arg(2, "keep_dims", "keepdim", default=False), "keep_dims")
    x = call.tensor(0)
    if call.primitive == "ReduceSum" and not chosen and flag(call.arg(3, "skip_mode", default=False), "skip_mode"):
        return call.emit("Identity", [x])
    if call.primitive in ("MeanExt", "SumExt") and call.arg(3, "dtype", default=None) is not None:
        raise TranslationError("a dtype argument to the reduction is not translated; cast before reducing")
    op_type = REDUCTIONS[call.primitive]
    if op_type == "ReduceSum":  # axes is an input from opset 13
        inputs = [x, _ints(call, chosen, "axes")] if chosen else [x]
        return call.emit(op_type, inputs, keepdims=int(keep))
    attrs = {"axes": list(chosen)} if chosen else {}
    return call.emit(op_type, [x], keepdims=int(keep), **attrs)


def strided_slice(call: PrimitiveCall) -> Value:
    begin = int_tuple(call.arg(1, "begin"), "begin")
    end = int_tuple(call.arg(2, "end"), "end")
    strides = int_tuple(call.arg(3, "strides"), "strides")
    masks = [int(call.arg(4 + i, name, default=0)) for i, name in enumerate(
        ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
    )]
    begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_mask = masks
    if ellipsis_mask or new_axis_mask:
        raise TranslationError("ellipsis_mask and new_axis_mask are not translated; index without ... and None")
    if not len(begin) == len(end) == len(strides):
        raise TranslationError(f"begin {begin}, end {end} and strides {strides} differ in length")
    starts, ends = list(begin), list(end)
    for i, step in enumerate(strides):
        if step == 0:
            raise TranslationError(f"stride 0 on axis {i}")
        if begin_mask >> i & 1:
            starts[i] = 0 if step > 0 else INT64_MAX
        if end_mask >> i & 1:
            ends[i] = INT64_MAX if step > 0 else INT64_MIN
        if shrink_mask >> i & 1:
            ends[i] = starts[i] + 1 if starts[i] != -1 else INT64_MAX
    x = call.tensor(0)
    sliced = [x, _ints(call, starts, "starts"), _ints(call, ends, "ends"),
              _ints(call, list(range(len(starts))), "axes"), _ints(call, strides, "steps")]
    shrunk = [i for i in range(len(strides)) if shrink_mask >> i & 1]
    if not shrunk:
        return call.emit("Slice", sliced)
    return call.emit("Squeeze", [call.step("Slice", sliced, like=x), _ints(call, shrunk, "shrink")])


def gather(call: PrimitiveCall) -> Value:
    x, indices = call.tensor(0), call.tensor(1)
    axis = _one_int(call.arg(2, "axis"), "axis")
    batch_dims = _one_int(call.arg(3, "batch_dims", default=0), "batch_dims")
    if batch_dims == 0:
        return call.emit("Gather", [x, indices], axis=axis)
    if x.rank is None or indices.rank is None:
        raise TranslationError("batch_dims needs the ranks of the input and the indices (no 'shape' attribute)")
    if not (-x.rank <= axis < x.rank and -indices.rank <= batch_dims < indices.rank):
        raise TranslationError(f"axis {axis} or batch_dims {batch_dims} is out of range for ranks {x.rank}, {indices.rank}")
    axis, batch_dims = axis % x.rank, batch_dims % indices.rank
    if not batch_dims <= axis:
        raise TranslationError(f"batch_dims {batch_dims} is greater than axis {axis}")
    return _batched_gather(call, x, indices, axis, batch_dims)


def gather_d(call: PrimitiveCall) -> Value:
    axis = _one_int(call.arg(1, "dim"), "dim")
    x, indices = call.tensor(0), call.tensor(2)
    if x.rank is not None and not -x.rank <= axis < x.rank:
        raise TranslationError(f"dim {axis} is out of range for an input of rank {x.rank}")
    return call.emit("GatherElements", [x, indices], axis=axis)


def _batched_gather(call: PrimitiveCall, x: TensorValue, indices: TensorValue, axis: int, batch: int) -> Value:
    """GatherND gathers along the axis right after the batch axes, and puts the index axes
    before the axes that followed; axes ``batch..axis-1`` of ``x`` are moved around it."""
    middle = list(range(batch, axis))
    moved = list(range(batch)) + [axis] + middle + list(range(axis + 1, x.rank))
    source = call.step("Transpose", [x], like=x, perm=moved) if middle else x
    index_axes = indices.rank - batch
    wide = call.step("Cast", [indices], to=onnx_type(np.int64))  # GatherND takes int64 only
    picked = call.step("Unsqueeze", [wide, _ints(call, [-1], "last")])
    if not middle:
        return call.emit("GatherND", [source, picked], batch_dims=batch)
    gathered = call.step("GatherND", [source, picked], like=x, batch_dims=batch)
    rank = index_axes + x.rank - 1
    after = [batch + index_axes + i for i in range(len(middle))]
    perm = list(range(batch)) + after + [batch + i for i in range(index_axes)] + list(range(after[-1] + 1, rank))
    return call.emit("Transpose", [gathered], perm=perm)


def _one_int(value, what: str) -> int:
    items = int_tuple(value, what)
    if len(items) != 1:
        raise TranslationError(f"{what} {value!r} must be one int")
    return items[0]


def reverse(call: PrimitiveCall) -> Value:
    chosen = int_tuple(call.arg(1, "axis"), "axis")
    count = len(chosen)
    starts, ends = _ints(call, [-1] * count, "starts"), _ints(call, [INT64_MIN] * count, "ends")
    steps = _ints(call, [-1] * count, "steps")
    return call.emit("Slice", [call.tensor(0), starts, ends, _ints(call, chosen, "axes"), steps])


TABLE = {
    "Reshape": reshape,
    "Flatten": flatten,
    "Transpose": transpose,
    "Squeeze": squeeze,
    "ExpandDims": expand_dims,
    "Concat": concat,
    "Cast": cast,
    "StridedSlice": strided_slice,
    "Gather": gather,
    "GatherD": gather_d,
    "ReverseV2": reverse,
    **{name: reduce for name in REDUCTIONS},
}
