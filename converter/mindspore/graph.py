"""The ONNX graph that a MINDIR graph is translated into, and the values flowing through it.

MINDIR values are tensors, constants (scalars, tuples, arrays, dtypes, None), tuples built by
``MakeTuple`` or returned by multi-output primitives (``BatchNorm``), and side-effect monads.
Only tensors exist in ONNX: constants become initializers where a tensor is needed, tuples are
taken apart by ``TupleGetItem``, monads disappear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from converter.mindspore.values import Monad

Shape = tuple[int | None, ...]


@dataclass(frozen=True)
class TensorValue:
    """An ONNX tensor: its name, and dtype/shape when known (None entries are unknown dims)."""

    name: str
    dtype: np.dtype | None = None
    shape: Shape | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


@dataclass(frozen=True)
class ConstValue:
    """A compile-time constant: a scalar, tuple/list, numpy array, dtype, string or None."""

    value: Any


@dataclass(frozen=True)
class TupleValue:
    """A tuple of values. ``primary`` is the item a plain tensor use takes (BatchNorm's output 0,
    for MINDIR writers that use BatchNorm's result without a TupleGetItem). ``untranslated``
    names the primitive's further outputs that have no ONNX value (LayerNorm's mean and rstd)."""

    items: tuple[Value, ...]
    primary: int | None = None
    untranslated: str = ""


Value = Union[TensorValue, ConstValue, TupleValue, Monad]


class TranslationError(Exception):
    """A primitive cannot be translated; ``reason`` says why (collected, then reported at once)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class OnnxGraph:
    """Nodes, initializers and names of the ONNX graph under construction."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    used_names: set[str] = field(default_factory=set)
    custom_domains: set[str] = field(default_factory=set)

    def fresh(self, base: str) -> str:
        base = base or "value"
        name, index = base, 1
        while name in self.used_names:
            name = f"{base}_{index}"
            index += 1
        self.used_names.add(name)
        return name

    def initializer(self, array: np.ndarray, base: str) -> TensorValue:
        name = self.fresh(base)
        array = np.ascontiguousarray(array)
        self.initializers[name] = array
        return TensorValue(name, array.dtype, tuple(array.shape))

    def constant_of(self, value: TensorValue) -> np.ndarray | None:
        """The array behind ``value`` when it is an initializer (a weight or a constant)."""
        return self.initializers.get(value.name)

    def add(
        self,
        op_type: str,
        inputs: Sequence[TensorValue | None],
        base: str,
        *,
        dtype: np.dtype | None = None,
        shape: Shape | None = None,
        outputs: int = 1,
        domain: str = "",
        **attrs: Any,
    ) -> TensorValue:
        """Append one ONNX node; return its (first) output. ``None`` inputs are omitted optionals."""
        names = [self.fresh(base if outputs == 1 else f"{base}_{i}") for i in range(outputs)]
        node = helper.make_node(
            op_type,
            ["" if value is None else value.name for value in inputs],
            names,
            name=self.fresh(f"{base}/{op_type}"),
            domain=domain or None,
            **attrs,
        )
        self.nodes.append(node)
        if domain:
            self.custom_domains.add(domain)
        return TensorValue(names[0], dtype, shape)

    def add_outputs(
        self, op_type: str, inputs: Sequence[TensorValue], base: str, count: int, domain: str, **attrs: Any
    ) -> list[TensorValue]:
        """Append a node with ``count`` outputs (custom nodes); return them all."""
        first = self.add(op_type, inputs, base, outputs=count, domain=domain, **attrs)
        node = self.nodes[-1]
        return [first] + [TensorValue(name) for name in node.output[1:]]

    def tensor_protos(self) -> list[onnx.TensorProto]:
        return [numpy_helper.from_array(array, name) for name, array in self.initializers.items()]


def as_array(value: Any, dtype: np.dtype | None = None) -> np.ndarray:
    """A constant as an array: Python floats become float32 unless ``dtype`` says otherwise."""
    array = np.asarray(value)
    if dtype is not None:
        return array.astype(dtype)
    if array.dtype == np.float64 and not isinstance(value, np.ndarray):
        return array.astype(np.float32)
    return array
