"""``nn.Cell``: the building block of networks (``mindspore/nn/cell.py``).

Attributes that are Parameters or Cells are registered in order; attaching a child renames
its parameters to dotted paths (``layer1.0.conv1.weight``), as ``Cell.__setattr__`` does via
``update_parameters_name``. A Cell may define ``bprop(self, *inputs, out, dout)`` returning one
gradient per input: it then replaces autodiff through ``construct`` (reference §4).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from train.autograd import make_result, no_grad
from train.errors import GradientError
from train.tensor import Parameter, Tensor


class Cell:
    """Base class of layers and networks; subclasses implement ``construct``."""

    def __init__(self, auto_prefix: bool = True) -> None:
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "_cells", OrderedDict())
        object.__setattr__(self, "training", False)
        object.__setattr__(self, "auto_prefix", auto_prefix)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_params" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.__init__ must call super().__init__() before setting {name!r}"
            )
        if isinstance(value, Parameter):
            value.name = name
            self._params[name] = value
        elif isinstance(value, Cell):
            if self.auto_prefix:
                value.update_parameters_name(name + ".")
            self._cells[name] = value
        object.__setattr__(self, name, value)

    # --- calling ----------------------------------------------------------------------
    def construct(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement construct()")

    def __call__(self, *args: Any) -> Any:
        if type(self).bprop is not Cell.bprop:
            return self._call_with_bprop(args)
        return self.construct(*args)

    def bprop(self, *args: Any) -> tuple:  # overridden by cells with a custom backward
        raise NotImplementedError

    def _call_with_bprop(self, args: tuple) -> Tensor:
        inputs = tuple(a if isinstance(a, Tensor) else Tensor(a) for a in args)
        with no_grad():
            out = self.construct(*inputs)
        if not isinstance(out, Tensor):
            raise GradientError(f"{type(self).__name__}.bprop is supported for single-Tensor outputs only")

        def backward(dout: np.ndarray) -> tuple:
            grads = self.bprop(*inputs, out, Tensor(dout))
            if not isinstance(grads, tuple) or len(grads) != len(inputs):
                raise GradientError(
                    f"{type(self).__name__}.bprop must return a tuple of {len(inputs)} "
                    f"gradients (one per input), got {type(grads).__name__}"
                )
            return tuple(
                None if g is None else np.asarray(g.data if isinstance(g, Tensor) else g) for g in grads
            )

        return make_result(out.data, inputs, backward)

    # --- structure --------------------------------------------------------------------
    def insert_child_to_cell(self, name: str, cell: Cell) -> None:
        setattr(self, name, cell)

    def cells_and_names(
        self, cells: set[int] | None = None, name_prefix: str = ""
    ) -> Iterator[tuple[str, Cell]]:
        """Yield ``(dotted name, cell)`` for this cell ('') and every descendant, once each."""
        seen = set() if cells is None else cells
        stack: list[tuple[str, Cell]] = [(name_prefix, self)]
        while stack:
            name, cell = stack.pop()
            if id(cell) in seen:
                continue
            seen.add(id(cell))
            yield name, cell
            children = [(f"{name}.{n}" if name else n, c) for n, c in cell._cells.items()]
            stack.extend(reversed(children))

    def cells(self) -> list[Cell]:
        return list(self._cells.values())

    def parameters_and_names(self) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for _, cell in self.cells_and_names():
            for param in cell._params.values():
                if id(param) not in seen:
                    seen.add(id(param))
                    yield param.name, param

    def get_parameters(self, expand: bool = True) -> Iterator[Parameter]:
        for _, param in self.parameters_and_names():
            yield param

    def trainable_params(self, recurse: bool = True) -> list[Parameter]:
        params = self.get_parameters() if recurse else iter(self._params.values())
        return [p for p in params if p.requires_grad]

    def untrainable_params(self) -> list[Parameter]:
        return [p for p in self.get_parameters() if not p.requires_grad]

    def parameters_dict(self, recurse: bool = True) -> OrderedDict[str, Parameter]:
        params = self.get_parameters() if recurse else iter(self._params.values())
        return OrderedDict((p.name, p) for p in params)

    def update_parameters_name(self, prefix: str = "") -> None:
        for param in self.get_parameters():
            param.name = prefix + param.name

    def set_train(self, mode: bool = True) -> Cell:
        for _, cell in self.cells_and_names():
            object.__setattr__(cell, "training", mode)
        return self

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}<{self.extra_repr()}>"]
        for name, child in self._cells.items():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return "\n".join(lines)


class SequentialCell(Cell):
    """Run children in order; children are named "0", "1", ... (``nn.SequentialCell``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        cells = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple, OrderedDict)) else args
        items = (
            cells.items() if isinstance(cells, OrderedDict) else ((str(i), c) for i, c in enumerate(cells))
        )
        for name, cell in items:
            self.insert_child_to_cell(name, cell)

    def __getitem__(self, index: int) -> Cell:
        return list(self._cells.values())[index]

    def __len__(self) -> int:
        return len(self._cells)

    def append(self, cell: Cell) -> None:
        self.insert_child_to_cell(str(len(self)), cell)

    def construct(self, x: Any) -> Any:
        for cell in self._cells.values():
            x = cell(x)
        return x
