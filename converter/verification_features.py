"""Sizes a layer's weights fix for an input's unknown axis, for planning verification inputs.

A model converted from another framework may leave an input's feature axis unknown
(``input [input_dim_0, input_dim_1]``, madmom's recurrent and convolutional networks) although
its first layer takes one size. That axis is followed through the ops that only move or add axes
(Unsqueeze, Squeeze, Transpose, Cast, element-wise ops) to the layer that fixes it:

- LSTM, GRU, RNN: ``X [seq, batch, input_size]``, ``W [directions, gates x hidden, input_size]``;
- MatMul: ``A``'s last axis is ``B``'s second to last;
- Gemm: ``A``'s axis 1 (0 with ``transA``) is ``B``'s axis 0 (1 with ``transB``);
- Conv: axis 1 is ``W.shape[1] * group``; an axis it convolves over is a length or an image side
  (:data:`LENGTH`, :data:`SIDE`), whatever its position in the input.

:func:`feature_sizes` returns them by input and axis.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_STEPS = 12  # ops followed from an input to the layer that fixes its axis
# Ops whose output keeps the axes of their first input (broadcasting a constant over it).
_SAME_AXES = {"Cast", "Identity", "Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf",
              "Add", "Sub", "Mul", "Div", "Pow", "Clip", "LeakyRelu", "Elu", "Softplus", "Dropout"}
_RECURRENT = {"LSTM", "GRU", "RNN"}


LENGTH = -1  # an axis a 1-D Conv convolves over: a length (of frames, samples), not a batch
SIDE = -2  # an axis a 2-D (or 3-D) Conv convolves over: an image side


def feature_sizes(proto: onnx.ModelProto, names: list[str]) -> dict[str, dict[int, int]]:
    """For each input in ``names``: axis -> the size a layer's weights give it (see the module),
    or :data:`LENGTH` / :data:`SIDE` for an axis a Conv convolves over (madmom's ``[time, features]``
    input, unsqueezed and transposed into a temporal convolution, has no batch axis at all)."""
    graph = proto.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for value in node.input:
            readers.setdefault(value, []).append(node)
    constants = _constants(graph)
    ranks = {value.name: len(value.type.tensor_type.shape.dim) for value in graph.input
             if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape")}
    sizes = {}
    for name in names:
        rank = ranks.get(name)
        if not rank:
            continue
        found = {axis: size for axis in range(rank)
                 if (size := _follow(name, axis, rank, readers, constants, _STEPS)) is not None}
        if found:
            sizes[name] = found
    return sizes


def _follow(value: str, axis: int, rank: int, readers, constants, steps: int) -> int | None:
    if steps == 0:
        return None
    for node in readers.get(value, []):
        if node.domain not in ("", "ai.onnx") or not node.input or node.input[0] != value:
            continue
        size = _fixed_by(node, axis, rank, constants)
        if size is not None:
            return size
        moved = _moved(node, axis, rank, constants)
        if moved is not None and node.output:
            size = _follow(node.output[0], *moved, readers, constants, steps - 1)
            if size is not None:
                return size
    return None


def _fixed_by(node: onnx.NodeProto, axis: int, rank: int, constants: dict[str, np.ndarray]) -> int | None:
    """The size ``node`` takes on its data input's ``axis``, from its weight, or None."""
    weight = constants.get(node.input[1]) if len(node.input) > 1 else None
    if weight is None:
        return None
    if node.op_type in _RECURRENT and rank == 3 and axis == 2 and weight.ndim == 3:
        return int(weight.shape[2])
    if node.op_type == "MatMul" and axis == rank - 1 and weight.ndim >= 2:
        return int(weight.shape[-2])
    if node.op_type == "Gemm" and rank == 2 and weight.ndim == 2 and axis == (0 if _int(node, "transA", 0) else 1):
        return int(weight.shape[1] if _int(node, "transB", 0) else weight.shape[0])
    if node.op_type == "Conv" and axis == 1 and weight.ndim >= 3:
        return int(weight.shape[1]) * _int(node, "group", 1)
    if node.op_type == "Conv" and axis >= 2 and weight.ndim == rank:
        return LENGTH if rank == 3 else SIDE
    return None


def _moved(node: onnx.NodeProto, axis: int, rank: int, constants: dict[str, np.ndarray]) -> tuple[int, int] | None:
    """Where ``axis`` of ``node``'s first input is in its output, and the output's rank; None when
    the op does not just carry it."""
    if node.op_type in _SAME_AXES:
        return axis, rank
    if node.op_type == "Transpose":
        perm = _ints(node, "perm") or list(reversed(range(rank)))
        return (perm.index(axis), rank) if axis in perm else None
    if node.op_type in ("Unsqueeze", "Squeeze"):
        axes = _axes(node, constants)
        if axes is None:
            return None
        if node.op_type == "Unsqueeze":
            out_rank = rank + len(axes)
            inserted = sorted(a % out_rank for a in axes)
            kept = [position for position in range(out_rank) if position not in inserted]
            return (kept[axis], out_rank) if axis < len(kept) else None
        removed = {a % rank for a in axes}
        if axis in removed or not removed:
            return None
        return axis - sum(1 for a in removed if a < axis), rank - len(removed)
    return None


def _axes(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> list[int] | None:
    if len(node.input) > 1:  # opset 13: an input
        value = constants.get(node.input[1])
        return None if value is None else [int(a) for a in value.reshape(-1)]
    return _ints(node, "axes")


_VALUES_READ = 64  # constants this small are read (Unsqueeze axes); larger ones only for their shapes


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and Constant outputs, by name: small ones with their values, weights as
    zero-strided stand-ins of their shape (no data read, external or not)."""
    tensors = list(graph.initializer) + [attribute.t for node in graph.node if node.op_type == "Constant"
                                         for attribute in node.attribute
                                         if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR]
    names = [init.name for init in graph.initializer] + [node.output[0] for node in graph.node
                                                          if node.op_type == "Constant" and node.output
                                                          for attribute in node.attribute
                                                          if attribute.name == "value"
                                                          and attribute.type == onnx.AttributeProto.TENSOR]
    values = {}
    for name, tensor in zip(names, tensors):
        dims = tuple(tensor.dims)
        small = int(np.prod(dims)) <= _VALUES_READ and tensor.data_location != onnx.TensorProto.EXTERNAL
        values[name] = numpy_helper.to_array(tensor) if small else np.lib.stride_tricks.as_strided(
            np.zeros(1, np.float32), shape=dims, strides=(0,) * len(dims))
    return values


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((attribute.i for attribute in node.attribute if attribute.name == name), default)


def _ints(node: onnx.NodeProto, name: str) -> list[int]:
    return next((list(attribute.ints) for attribute in node.attribute if attribute.name == name), [])
