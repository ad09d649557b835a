"""Values between lowerings: tensors, and host values (Python ints/floats and 1-D lists of them).

Host values carry shape arithmetic (``Shape -> Gather -> Concat -> Reshape``) in Python, where
``torch.compile`` sees static (or symbolic) sizes rather than tensors it would have to read back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

HostValue = int | float | bool | list


def is_host(value: Any) -> bool:
    return not isinstance(value, torch.Tensor)


def to_tensor(value: Any, like: torch.Tensor | None = None, *, dtype: torch.dtype | None = None,
              device: torch.device | str | None = None) -> torch.Tensor:
    """A tensor of ``value``; host values take the dtype (and device) of ``like`` unless given."""
    if isinstance(value, torch.Tensor):
        return value
    if like is not None:
        dtype = dtype or like.dtype
        device = device or like.device
    return torch.tensor(value, dtype=dtype, device=device)


class ArrayAttribute(NamedTuple):
    """A tensor-valued attribute (ConstantOfShape's ``value``) in a form torch.fx can write into
    the code it generates: it spells a NamedTuple as a call of its type, where a numpy array's
    repr (``array([0.], dtype=float32)``) names nothing the generated code can resolve."""

    values: tuple
    dtype: str
    shape: tuple

    @classmethod
    def of(cls, array: np.ndarray) -> ArrayAttribute:
        return cls(tuple(array.reshape(-1).tolist()), str(array.dtype), tuple(array.shape))


def host_array(value: Any) -> np.ndarray:
    """A tensor-valued attribute as the numpy array it holds (see :class:`ArrayAttribute`)."""
    if isinstance(value, ArrayAttribute):
        return np.asarray(value.values, dtype=np.dtype(value.dtype)).reshape(value.shape)
    return np.asarray(value)


def host_ints(value: Any) -> list[int]:
    """A 1-D integer input read on the host (shapes, axes, pads, ...): a list of ints."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()  # data-dependent: a graph break under torch.compile, but exact
    if isinstance(value, (list, tuple)):
        return [int(v) if isinstance(v, (bool, float)) else v for v in value]
    return [value]


def host_floats(value: Any) -> list[float]:
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [float(v) for v in value]
    return [float(value)]


def host_scalar(value: Any) -> Any:
    """A 0-d (or one-element) input read on the host."""
    if isinstance(value, torch.Tensor):
        return value.reshape(-1)[0].item()
    if isinstance(value, (list, tuple)):
        return value[0]
    return value


def host_elementwise(fn: Callable[..., Any], *values: Any) -> Any:
    """``fn`` applied elementwise to host values with numpy-style broadcasting of rank ≤ 1."""
    length = max((len(v) for v in values if isinstance(v, list)), default=None)
    if length is None:
        return fn(*values)
    columns = [v if isinstance(v, list) and len(v) == length else
               (v * length if isinstance(v, list) else [v] * length) for v in values]
    return [fn(*items) for items in zip(*columns)]


def common(values: Sequence[Any]) -> list[torch.Tensor]:
    """Tensors of ``values``, host values converted like the first tensor among them."""
    like = next(v for v in values if isinstance(v, torch.Tensor))
    return [to_tensor(v, like) for v in values]


def trunc_div(a: Any, b: Any) -> Any:
    """Integer division rounding toward zero (ONNX Div on integers), for ints and SymInts."""
    quotient = a // b
    if quotient < 0 and quotient * b != a:
        quotient += 1
    return quotient


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def rank_of(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.dim()
    return 1 if isinstance(value, list) else 0


def shape_of(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    return [len(value)] if isinstance(value, list) else []
