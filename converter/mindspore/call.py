"""One MINDIR primitive application, as the primitive translators see it.

A primitive's attributes live in one of three places depending on the writer (reference §1.3,
§1.4): on ``ModelProto.primitives[...]`` (MindSpore 2.x, ``op_type = "REF::Name:uid"``), on the
node itself (1.x, bare ``op_type``), or, for primitives generated from yaml
(``PrimitiveFunction``; ``prim_type = PRIMITIVE_FUNCTION``), as extra constant inputs after the
tensor inputs. :meth:`PrimitiveCall.arg` looks in all three, so one translator serves every form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from converter.mindspore.graph import (
    ConstValue,
    OnnxGraph,
    Shape,
    TensorValue,
    TranslationError,
    TupleValue,
    Value,
    as_array,
)
from converter.mindspore.values import Monad

REQUIRED = object()


@dataclass
class PrimitiveCall:
    graph: OnnxGraph
    node_name: str  # the MINDIR node's name, for messages
    base: str  # a readable base for ONNX names (the node's scope path)
    primitive: str
    inputs: list[Value]
    attributes: dict[str, Any]
    outputs_info: list[tuple[np.dtype | None, Shape | None]]

    # ---------------------------------------------------------------- inputs
    def tensor(self, index: int, dtype: np.dtype | None = None) -> TensorValue:
        """Input ``index`` as an ONNX tensor (constants become initializers of ``dtype``)."""
        if index >= len(self.inputs):
            raise TranslationError(f"has {len(self.inputs)} inputs, input {index} is required")
        return to_tensor(self.graph, self.inputs[index], f"{self.base}/const", dtype)

    def tensors(self, start: int, stop: int) -> list[TensorValue]:
        return [self.tensor(i) for i in range(start, min(stop, len(self.inputs)))]

    def arg(self, index: int | None, *names: str, default: Any = REQUIRED) -> Any:
        """An attribute: the extra input at ``index`` if present, else a named attribute, else
        ``default`` (a missing required attribute is a translation error)."""
        if index is not None and index < len(self.inputs):
            return self.constant(index, names[0] if names else f"input {index}")
        for name in names:
            if name in self.attributes:
                return self.attributes[name]
        if default is REQUIRED:
            raise TranslationError(f"attribute {names[0]!r} is missing (neither an input nor an attribute)")
        return default

    def constant(self, index: int, what: str) -> Any:
        value = self.inputs[index]
        if isinstance(value, ConstValue):
            return value.value
        if isinstance(value, TensorValue):
            array = self.graph.constant_of(value)
            if array is not None:
                return array
        if isinstance(value, TupleValue) and all(isinstance(v, ConstValue) for v in value.items):
            return tuple(v.value for v in value.items)  # type: ignore[union-attr]
        raise TranslationError(f"{what} must be a constant here, but is computed by the graph")

    # ---------------------------------------------------------------- outputs
    def out(self, index: int = 0) -> tuple[np.dtype | None, Shape | None]:
        if index < len(self.outputs_info):
            return self.outputs_info[index]
        return None, None

    def emit(self, op_type: str, inputs: Sequence[TensorValue | None], **attrs: Any) -> TensorValue:
        """Append an ONNX node whose output is this primitive's (first) output."""
        dtype, shape = self.out()
        return self.graph.add(op_type, inputs, self.base, dtype=dtype, shape=shape, **attrs)

    def step(
        self, op_type: str, inputs: Sequence[TensorValue | None], like: TensorValue | None = None, **attrs: Any
    ) -> TensorValue:
        """Append an intermediate ONNX node (dtype/shape taken from ``like`` if given)."""
        dtype = like.dtype if like is not None else None
        return self.graph.add(op_type, inputs, self.base, dtype=dtype, **attrs)

    def initializer(self, array: np.ndarray, suffix: str = "const") -> TensorValue:
        return self.graph.initializer(array, f"{self.base}/{suffix}")


def to_tensor(graph: OnnxGraph, value: Value, base: str, dtype: np.dtype | None = None) -> TensorValue:
    if isinstance(value, TensorValue):
        return value
    if isinstance(value, ConstValue):
        if value.value is None or isinstance(value.value, str):
            raise TranslationError(f"the constant {value.value!r} is used where a tensor is needed")
        return graph.initializer(as_array(value.value, dtype), base)
    if isinstance(value, TupleValue):
        if value.primary is not None:
            return to_tensor(graph, value.items[value.primary], base, dtype)
        if _int_scalars(value.items):
            return _sizes_tensor(graph, value.items, base)
        raise TranslationError("a tuple is used where a tensor is needed (missing TupleGetItem?)")
    if isinstance(value, Monad):
        raise TranslationError("a side-effect token (monad) is used where a tensor is needed")
    raise TranslationError(f"unexpected value {value!r}")


def _int_scalars(items: tuple[Value, ...]) -> bool:
    """Every item an int constant or an int scalar tensor: sizes, some read at run time (``Shape``
    of a dynamic-batch input, :mod:`converter.mindspore.primitives.sizes`)."""
    def is_int(item: Value) -> bool:
        if isinstance(item, ConstValue):
            return isinstance(item.value, (int, np.integer)) and not isinstance(item.value, bool)
        return isinstance(item, TensorValue) and item.shape == () and item.dtype is not None and item.dtype.kind in "iu"

    return bool(items) and all(is_int(item) for item in items)


def _sizes_tensor(graph: OnnxGraph, items: tuple[Value, ...], base: str) -> TensorValue:
    """The int items as one 1-D int64 tensor: Concat of the constants and the unsqueezed scalars."""
    axis = graph.initializer(np.array([0], np.int64), f"{base}/axis")
    parts = []
    for item in items:
        if isinstance(item, ConstValue):
            parts.append(graph.initializer(np.array([int(item.value)], np.int64), f"{base}/size"))
        else:
            wide = graph.add("Cast", [item], base, dtype=np.dtype(np.int64), shape=(), to=7)  # INT64
            parts.append(graph.add("Unsqueeze", [wide, axis], base, dtype=np.dtype(np.int64), shape=(1,)))
    return graph.add("Concat", parts, base, dtype=np.dtype(np.int64), shape=(len(items),), axis=0)
