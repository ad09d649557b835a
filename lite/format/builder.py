"""A small builder for .lite models, for tests, examples and hand-made graphs.

    b = GraphBuilder("tiny")
    x = b.input("x", np.float32, ["N", 4])
    w = b.constant("w", np.ones((4, 2), np.float32))
    y = b.node("MatMul", [x, w])
    y = b.node("Relu", [y], outputs=["y"])
    b.output(y, np.float32, ["N", 2])
    save(b.build(), "tiny.lite")

Attribute values are typed from Python: ``int`` INT, ``float`` FLOAT, ``str``/``bytes`` STRING,
a list of ints INTS, of floats FLOATS, of strings STRINGS, an ``np.ndarray`` TENSOR; pass an
:class:`~lite.format.ir.Attribute` for anything else.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lite.format import ir
from lite.format.dtypes import DataType, from_numpy

AT = ir.AttributeType


class GraphBuilder:
    def __init__(self, name: str = "main", opset: int = 21) -> None:
        self.graph = ir.Graph(name=name)
        self.opset = opset
        self._index: dict[str, int] = {}
        self._counter = 0

    def _tensor(self, name: str, dtype: DataType = DataType.UNDEFINED, shape=None, data=None) -> int:
        if name in self._index:
            raise ValueError(f"tensor {name!r} already exists in graph {self.graph.name!r}")
        self.graph.tensors.append(ir.Tensor(name=name, dtype=dtype, shape=shape, data=data))
        self._index[name] = len(self.graph.tensors) - 1
        return self._index[name]

    def _fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}_{self._counter}"

    def input(self, name: str, dtype, shape: Sequence[ir.Dim] | None) -> str:
        index = self._tensor(name, _dtype(dtype), None if shape is None else tuple(shape))
        self.graph.inputs.append(index)
        return name

    def constant(self, name: str, value: np.ndarray) -> str:
        array = np.asarray(value)
        self._tensor(name, from_numpy(array.dtype), tuple(array.shape), array)
        return name

    def node(self, op_type: str, inputs: Sequence[str | None], outputs: int | Sequence[str] = 1,
             name: str | None = None, domain: str = "", **attributes) -> str | tuple[str, ...]:
        """Add a node; returns its output name (or a tuple when it has several)."""
        input_indices = []
        for value in inputs:
            if value is None or value == "":
                input_indices.append(-1)
            elif value not in self._index:
                raise ValueError(f"node {op_type}: unknown input tensor {value!r}")
            else:
                input_indices.append(self._index[value])
        names = [self._fresh(op_type.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        output_indices = [self._tensor(n) if n else -1 for n in names]
        self.graph.nodes.append(ir.Node(
            op_type=op_type, inputs=input_indices, outputs=output_indices, domain=domain,
            name=name or self._fresh(op_type),
            attributes={key: attribute(value) for key, value in attributes.items()},
        ))
        return names[0] if len(names) == 1 else tuple(names)

    def output(self, name: str, dtype=None, shape: Sequence[ir.Dim] | None = None) -> None:
        index = self._index[name]
        tensor = self.graph.tensors[index]
        if dtype is not None:
            tensor.dtype = _dtype(dtype)
        if shape is not None:
            tensor.shape = tuple(shape)
        self.graph.outputs.append(index)

    def build(self, metadata: dict[str, str] | None = None) -> ir.Model:
        return ir.Model(graphs=[self.graph], opset_imports={"": self.opset}, metadata=dict(metadata or {}))


def attribute(value) -> ir.Attribute:
    """An :class:`ir.Attribute` typed from a Python value (see the module docstring)."""
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, (bool, int, np.integer)):
        return ir.Attribute(AT.INT, int(value))
    if isinstance(value, (float, np.floating)):
        return ir.Attribute(AT.FLOAT, float(value))
    if isinstance(value, str):
        return ir.Attribute(AT.STRING, value.encode())
    if isinstance(value, bytes):
        return ir.Attribute(AT.STRING, value)
    if isinstance(value, np.ndarray):
        return ir.Attribute(AT.TENSOR, ir.Tensor("", from_numpy(value.dtype), tuple(value.shape), value))
    if isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(v, (bool, int, np.integer)) for v in items):
            return ir.Attribute(AT.INTS, [int(v) for v in items])
        if all(isinstance(v, (int, float, np.number)) for v in items):
            return ir.Attribute(AT.FLOATS, [float(v) for v in items])
        if all(isinstance(v, (str, bytes)) for v in items):
            return ir.Attribute(AT.STRINGS, [v.encode() if isinstance(v, str) else v for v in items])
    raise TypeError(f"cannot infer an attribute type for {value!r}; pass lite.format.ir.Attribute")


def _dtype(dtype) -> DataType:
    if isinstance(dtype, DataType):
        return dtype
    return from_numpy(np.dtype(dtype))
