"""Tensor and Parameter: numpy arrays that remember how they were computed.

Mirrors ``mindspore.Tensor`` / ``mindspore.Parameter`` where it matters to users:
``Tensor(x).asnumpy()``, ``.shape``, ``.dtype``, arithmetic operators, and parameters with
dotted names (``conv1.weight``) that optimizers update in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from train import autograd
from train.errors import GradientError


def _as_array(data: Any, dtype: Any = None) -> np.ndarray:
    if isinstance(data, Tensor):
        data = data.data
    if isinstance(data, (np.ndarray, np.generic)):  # numpy scalars (0-d op results) keep their dtype
        data = np.asarray(data)
        return data if dtype is None else data.astype(dtype, copy=False)
    array = np.asarray(data, dtype=dtype)
    if dtype is None and array.dtype == np.float64:
        # Python floats become float32, as mindspore.Tensor(1.0) does
        array = array.astype(np.float32)
    return array


class Tensor:
    """An n-dimensional array with reverse-mode autodiff (see :mod:`train.autograd`)."""

    __array_priority__ = 100.0

    def __init__(self, data: Any, dtype: Any = None, requires_grad: bool = False) -> None:
        self.data: np.ndarray = _as_array(data, dtype)
        self.requires_grad = requires_grad
        self.grad: np.ndarray | None = None
        self._parents: tuple[Tensor, ...] = ()
        self._backward: autograd.Backward | None = None

    # --- numpy side -------------------------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        return self.data

    numpy = asnumpy

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.data if dtype is None else self.data.astype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    def __len__(self) -> int:
        return len(self.data)

    def item(self) -> Any:
        return self.data.item()

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, value={self.data!r})"

    def astype(self, dtype: Any) -> Tensor:
        return ops.cast(self, dtype)

    def detach(self) -> Tensor:
        return Tensor(self.data)

    # --- autodiff ---------------------------------------------------------------------
    def backward(self, dout: Any = None) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
        if not self.requires_grad:
            raise GradientError(
                "backward() on a tensor that does not require grad: no parameter or "
                "input with requires_grad=True reaches it"
            )
        seed = np.ones_like(self.data) if dout is None else _as_array(dout, self.dtype)
        leaves = {id(n): n for n in autograd.topological_order([self]) if n._backward is None}
        for key, grad in autograd.run_backward([self], [seed]).items():
            leaf = leaves[key]
            leaf.grad = grad if leaf.grad is None else leaf.grad + grad

    # --- operators (the ops live in train.ops) ----------------------------------------
    def __add__(self, other: Any) -> Tensor:
        return ops.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return ops.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return ops.sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return ops.sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return ops.mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return ops.mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return ops.div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return ops.div(other, self)

    def __neg__(self) -> Tensor:
        return ops.neg(self)

    def __pow__(self, exponent: float) -> Tensor:
        return ops.power(self, exponent)

    def __matmul__(self, other: Any) -> Tensor:
        return ops.matmul(self, other)

    def __getitem__(self, index: Any) -> Tensor:
        return ops.getitem(self, index)

    def reshape(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return ops.reshape(self, shape)

    def transpose(self, *axes: int) -> Tensor:
        return ops.transpose(self, axes or None)

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return ops.reduce_sum(self, axis, keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return ops.reduce_mean(self, axis, keepdims)

    def exp(self) -> Tensor:
        return ops.exp(self)

    def log(self) -> Tensor:
        return ops.log(self)

    # comparisons give plain boolean arrays: they are not differentiable
    def __gt__(self, other: Any) -> np.ndarray:
        return self.data > _as_array(other)

    def __lt__(self, other: Any) -> np.ndarray:
        return self.data < _as_array(other)

    __hash__ = object.__hash__


class Parameter(Tensor):
    """A trainable tensor with a name (``mindspore.Parameter``).

    Cells rename their parameters to dotted attribute paths (``layer1.0.conv1.weight``) when
    they are attached, as MindSpore's ``Cell.__setattr__`` does.
    """

    def __init__(self, data: Any, name: str = "Parameter", requires_grad: bool = True) -> None:
        super().__init__(data, requires_grad=requires_grad)
        self.name = name

    def set_data(self, data: Any) -> Parameter:
        """Replace the value in place (shape may change only through this call)."""
        self.data = _as_array(data)
        return self

    def clone(self, name: str | None = None) -> Parameter:
        return Parameter(self.data.copy(), name or self.name, self.requires_grad)

    def __repr__(self) -> str:
        return f"Parameter(name={self.name!r}, shape={self.shape}, dtype={self.dtype})"


from train import ops
