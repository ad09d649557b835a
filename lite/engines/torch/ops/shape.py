"""Lowerings that move data without arithmetic, and reductions.

Shape-like inputs (Reshape's shape, Slice's starts, Unsqueeze's axes, ...) are read on the host
(:func:`host_ints`); when they come from ``Shape`` or constants they already are host values.
Semantics: https://onnx.ai/onnx/operators/ (Reshape's 0 copies a dimension unless
``allowzero``; Slice clamps like Python slices; Gather takes negative indices; Expand
broadcasts both ways).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lite.engines.torch.ops._values import (
    common,
    host_array,
    host_ints,
    host_scalar,
    is_host,
    normalize_axis,
    rank_of,
    shape_of,
    to_tensor,
)
from lite.engines.torch.ops.registry import lowering


@lowering("Shape")
def Shape(data, *, start=0, end=None):
    return shape_of(data)[start:end]


@lowering("Size")
def Size(data):
    return math.prod(shape_of(data))


@lowering("Flatten")
def Flatten(input, *, axis=1):
    shape = shape_of(input)
    axis = normalize_axis(axis, len(shape))
    return input.reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))


@lowering("Reshape", since=5, static=(1,))
def Reshape(data, shape, *, allowzero=0):
    target = host_ints(shape)
    current = shape_of(data)
    if not allowzero:
        target = [current[i] if dim == 0 else dim for i, dim in enumerate(target)]
    if is_host(data):
        return [data] if target == [1] and not isinstance(data, list) else (data if target != [] else data[0])
    return data.reshape(target)


@lowering("Transpose")
def Transpose(data, *, perm=None):
    if perm is None:
        perm = list(reversed(range(data.dim())))
    return data.permute(perm)


@lowering("Concat")
def Concat(*inputs, axis):
    if all(is_host(v) for v in inputs):
        return [item for value in inputs for item in (value if isinstance(value, list) else [value])]
    tensors = [t for t in common(list(inputs)) if t.numel() != 0 or t.dim() != 1]
    return torch.cat(tensors, dim=axis)


def _axes(axes_input: Any, attribute: list[int] | None) -> list[int] | None:
    if axes_input is not None:
        return host_ints(axes_input)
    return attribute


@lowering("Squeeze", since=1, static=(1,))
def Squeeze(data, axes_input=None, *, axes=None):
    axes = _axes(axes_input, axes)
    if is_host(data):
        return data[0] if isinstance(data, list) else data
    if axes is None:
        return data.squeeze()
    axes = [normalize_axis(a, data.dim()) for a in axes]
    return data.squeeze(tuple(axes)) if axes else data


@lowering("Unsqueeze", since=1, static=(1,))
def Unsqueeze(data, axes_input=None, *, axes=None):
    axes = _axes(axes_input, axes)
    rank = rank_of(data) + len(axes)
    axes = sorted(normalize_axis(a, rank) for a in axes)
    if is_host(data) and not isinstance(data, list) and axes == [0]:
        return [data]
    data = to_tensor(data) if is_host(data) else data
    for axis in axes:
        data = data.unsqueeze(axis)
    return data


@lowering("Slice", since=1)
def Slice_1(data, *, axes=None, ends, starts):
    return _slice(data, starts, ends, axes, None)


@lowering("Slice", since=10, static=(1, 2, 3, 4))
def Slice(data, starts, ends, axes=None, steps=None):
    return _slice(data, host_ints(starts), host_ints(ends), None if axes is None else host_ints(axes),
                  None if steps is None else host_ints(steps))


def _slice(data, starts, ends, axes, steps):
    rank = rank_of(data)
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, rank) for a in axes]
    steps = steps or [1] * len(starts)
    if is_host(data):
        return data[slice(starts[0], ends[0], steps[0])]
    index: list[Any] = [slice(None)] * rank
    backwards = []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if step > 0:
            index[axis] = slice(start, end, step)
        else:
            backwards.append((axis, start, end, step))
    result = data[tuple(index)]
    for axis, start, end, step in backwards:
        # torch slices forwards only: pick the indices Python's slice rules give.
        picked = list(range(*slice(start, end, step).indices(result.shape[axis])))
        result = result.index_select(axis, torch.tensor(picked, dtype=torch.long, device=result.device))
    return result


@lowering("Gather")
def Gather(data, indices, *, axis=0):
    rank = rank_of(data)
    axis = normalize_axis(axis, rank)
    if is_host(data):
        if isinstance(indices, list):
            return [data[i] for i in indices]
        return data[host_scalar(indices)]
    size = data.shape[axis]
    if is_host(indices) and not isinstance(indices, list):
        return data.select(axis, indices + size if indices < 0 else indices)
    if is_host(indices):
        indices = to_tensor([i + size if i < 0 else i for i in indices], dtype=torch.long, device=data.device)
    else:
        indices = torch.where(indices < 0, indices + size, indices)
    picked = data.index_select(axis, indices.reshape(-1).long())
    return picked.reshape(list(data.shape[:axis]) + list(indices.shape) + list(data.shape[axis + 1:]))


@lowering("GatherElements")
def GatherElements(data, indices, *, axis=0):
    indices = to_tensor(indices, dtype=torch.long, device=data.device)
    size = data.shape[normalize_axis(axis, data.dim())]
    return torch.gather(data, axis, torch.where(indices < 0, indices + size, indices))


@lowering("Expand", static=(1,))
def Expand(input, shape):
    target = host_ints(shape)
    input = to_tensor(input) if is_host(input) else input
    return input.expand(torch.broadcast_shapes(tuple(input.shape), tuple(target)))


@lowering("ConstantOfShape", static=(0,))
def ConstantOfShape(input, *, value=None, float_type, device):
    shape = host_ints(input) if not (isinstance(input, list) and not input) else []
    if value is None:
        return torch.zeros(shape, dtype=float_type, device=device)
    array = host_array(value).reshape(-1)
    dtype = float_type if array.dtype == np.float32 else torch.from_numpy(array[:0].copy()).dtype
    return torch.full(shape, array[0].item(), dtype=dtype, device=device)


@lowering("Range", static=(0, 1, 2))
def Range(start, limit, delta, *, float_type, device):
    values = [host_scalar(v) for v in (start, limit, delta)]
    if all(isinstance(v, int) for v in values):
        dtype = torch.long
    else:
        dtype = next((v.dtype for v in (start, limit, delta) if isinstance(v, torch.Tensor)), float_type)
    count = max(math.ceil((values[1] - values[0]) / values[2]), 0)
    return torch.arange(count, dtype=dtype, device=device) * values[2] + values[0]


@lowering("Split", since=1, static=(1,))
def Split(input, split=None, *, axis=0, num_outputs=None, output_count):
    size = input.shape[normalize_axis(axis, input.dim())]
    if split is not None:
        sizes = host_ints(split)
    else:
        count = num_outputs or output_count
        chunk = -(-size // count)
        sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
    parts = torch.split(input, sizes, dim=axis)
    return tuple(parts) if output_count > 1 else parts[0]


@lowering("Tile", static=(1,))
def Tile(input, repeats):
    return input.repeat(host_ints(repeats))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@lowering("Pad", since=11, static=(1, 2, 3), check=lambda a: None if a.get("mode", "constant") in _PAD_MODES
          else f"Pad mode {a.get('mode')!r}")
def Pad(data, pads, constant_value=None, axes=None, *, mode="constant"):
    pads = host_ints(pads)
    rank = data.dim()
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in host_ints(axes)]
    begin, end = [0] * rank, [0] * rank
    for position, axis in enumerate(axes):
        begin[axis], end[axis] = pads[position], pads[position + len(axes)]
    flat = []
    for b, e in zip(reversed(begin), reversed(end)):
        flat += [b, e]
    while len(flat) > 2 and flat[-1] == 0 and flat[-2] == 0 and mode != "constant":
        flat = flat[:-2]  # torch pads only the trailing axes in the non-constant modes
    if mode == "constant":
        value = 0 if constant_value is None else host_scalar(constant_value)
        return F.pad(data, flat, value=value)
    return F.pad(data, flat, mode=_PAD_MODES[mode])


# -- reductions ----------------------------------------------------------------------------------
def _reduce(data, axes, keepdims, noop_with_empty_axes, fn, host_fn):
    if is_host(data):  # shape arithmetic: a 1-D host value reduces to one number
        total = host_fn(data if isinstance(data, list) else [data])
        return [total] if keepdims else total
    if not axes:
        if noop_with_empty_axes:
            return data
        axes = list(range(data.dim()))
    axes = tuple(normalize_axis(a, data.dim()) for a in axes)
    return fn(data, axes, bool(keepdims))


def _register_reduce(op_type: str, fn, input_since: int, host_fn=None) -> None:
    def attribute_form(data, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        return _reduce(data, axes, keepdims, noop_with_empty_axes, fn, host_fn)

    def input_form(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return _reduce(data, None if axes is None else host_ints(axes), keepdims, noop_with_empty_axes, fn, host_fn)

    lowering(op_type, since=1)(attribute_form)
    lowering(op_type, since=input_since, static=(1,))(input_form)


def _reduce_prod(x, axes, keepdim):
    for axis in sorted(axes, reverse=True):
        x = x.prod(dim=axis, keepdim=keepdim)
    return x


_register_reduce("ReduceSum", lambda x, axes, keepdim: x.sum(dim=axes, keepdim=keepdim), 13, sum)
for _op, (_fn, _host_fn) in {
    "ReduceMean": (lambda x, axes, keepdim: x.mean(dim=axes, keepdim=keepdim), lambda v: sum(v) / len(v)),
    "ReduceMax": (lambda x, axes, keepdim: x.amax(dim=axes, keepdim=keepdim), max),
    "ReduceMin": (lambda x, axes, keepdim: x.amin(dim=axes, keepdim=keepdim), min),
    "ReduceProd": (_reduce_prod, math.prod),
    "ReduceL2": (lambda x, axes, keepdim: x.square().sum(dim=axes, keepdim=keepdim).sqrt(), None),
    "ReduceSumSquare": (lambda x, axes, keepdim: x.square().sum(dim=axes, keepdim=keepdim), None),
}.items():
    _register_reduce(_op, _fn, 18, _host_fn)


def _check_select_last(attributes: dict[str, Any]) -> str | None:
    return "select_last_index=1" if attributes.get("select_last_index", 0) else None


@lowering("ArgMax", check=_check_select_last)
def ArgMax(data, *, axis=0, keepdims=1, select_last_index=0):
    return torch.argmax(data, dim=axis, keepdim=bool(keepdims))


@lowering("ArgMin", check=_check_select_last)
def ArgMin(data, *, axis=0, keepdims=1, select_last_index=0):
    return torch.argmin(data, dim=axis, keepdim=bool(keepdims))


@lowering("TopK", since=10, static=(1,))
def TopK(X, K, *, axis=-1, largest=1, sorted=1, output_count):
    values, indices = torch.topk(X, host_scalar(K), dim=axis, largest=bool(largest), sorted=True)
    return (values, indices) if output_count > 1 else values


@lowering("DepthToSpace")
def DepthToSpace(input, *, blocksize, mode="DCR"):
    n, c, h, w = input.shape
    b = blocksize
    if mode == "DCR":
        x = input.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        x = input.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(n, c // (b * b), h * b, w * b)


@lowering("SpaceToDepth")
def SpaceToDepth(input, *, blocksize):
    n, c, h, w = input.shape
    b = blocksize
    x = input.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return x.reshape(n, c * b * b, h // b, w // b)


@lowering("Constant")
def Constant(*, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None, float_type,
             device):
    if value is not None:
        array = host_array(value)
        tensor = torch.from_numpy(array.copy()).to(device)
        return tensor.to(float_type) if array.dtype == np.float32 else tensor
    if value_float is not None:
        return torch.tensor(value_float, dtype=float_type, device=device)
    if value_floats is not None:
        return torch.tensor(value_floats, dtype=float_type, device=device)
    if value_int is not None:
        return value_int
    return list(value_ints)
