"""Shape ops: reshape, transpose, flatten, indexing, concatenation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from train import _trace
from train.autograd import make_result
from train.errors import ExportError
from train.tensor import Tensor


def reshape(a: Tensor, shape: Sequence[int]) -> Tensor:
    source = a.shape
    out = make_result(a.data.reshape(tuple(shape)), (a,), lambda g: (g.reshape(source),))
    target = list(shape)
    if target and target[0] == source[0]:
        target[0] = 0  # ONNX Reshape: 0 copies the (dynamic) batch dimension
    _trace.record("Reshape", [a, np.asarray(target, dtype=np.int64)], out)
    return out


def flatten(a: Tensor) -> Tensor:
    """(N, ...) -> (N, prod(...)), as ``nn.Flatten``."""
    source = a.shape
    out = make_result(a.data.reshape(source[0], -1), (a,), lambda g: (g.reshape(source),))
    _trace.record("Flatten", [a], out, axis=1)
    return out


def transpose(a: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    perm = tuple(axes) if axes is not None else tuple(reversed(range(a.ndim)))
    inverse = tuple(np.argsort(perm))
    out = make_result(a.data.transpose(perm), (a,), lambda g: (g.transpose(inverse),))
    _trace.record("Transpose", [a], out, perm=list(perm))
    return out


def getitem(a: Tensor, index: Any) -> Tensor:
    if isinstance(index, Tensor):
        index = index.data

    def backward(g: np.ndarray) -> tuple:
        full = np.zeros_like(a.data)
        np.add.at(full, index, g)
        return (full,)

    if _trace.active() is not None:
        raise ExportError("tensor indexing cannot be exported; use reshape or flatten in construct instead")
    return make_result(a.data[index], (a,), backward)


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """``ops.concat`` along ``axis``."""
    parts = list(tensors)
    bounds = np.cumsum([t.shape[axis] for t in parts])[:-1]

    def backward(g: np.ndarray) -> tuple:
        return tuple(np.split(g, bounds, axis=axis))

    out = make_result(np.concatenate([t.data for t in parts], axis=axis), tuple(parts), backward)
    _trace.record("Concat", parts, out, axis=axis)
    return out
