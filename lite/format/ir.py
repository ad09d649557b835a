"""The in-memory form of a .lite model.

These dataclasses are what the writer takes and the reader returns; the converter builds them
and the engines execute them. They mirror ``schema/model.fbs`` one to one:

- a :class:`Model` holds graphs (index 0 is the main graph; the others are bodies of
  If/Loop/Scan, referenced from attributes by index), opset imports and metadata;
- a :class:`Graph` owns its tensors; nodes, graph inputs and outputs refer to them by index;
  ``-1`` in a node's inputs is an omitted optional input;
- a :class:`Tensor` with ``data`` is a constant (a weight); ``data`` may be a read-only view
  into a memory-mapped file;
- a subgraph reads tensors of enclosing graphs by name: those tensors are listed in
  ``Graph.captures``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Union

import numpy as np

from lite.format.dtypes import DataType

# A dimension is a fixed size, a symbolic name, or unknown (None).
Dim = Union[int, str, None]

FORMAT_VERSION = (2, 1)  # the version written; readers read 1.x and 2.x (docs/format.md)
# Metadata key of the types of sequence and optional values (the tensor table holds only their
# element type): JSON {graph index: {value name: "seq(tensor(float))", ...}}, written by the converter.
VALUE_TYPES_KEY = "lite.value_types"


class AttributeType(IntEnum):
    """Attribute value kinds; numbering follows ONNX's ``AttributeProto.AttributeType``."""

    UNDEFINED = 0
    FLOAT = 1
    INT = 2
    STRING = 3
    TENSOR = 4
    GRAPH = 5
    FLOATS = 6
    INTS = 7
    STRINGS = 8
    TENSORS = 9
    GRAPHS = 10


@dataclass
class QuantParams:
    """Explicit quantization parameters of one tensor.

    ``real = scale * (q - zero_point)``. ``axis is None`` means per-tensor (one scale); otherwise
    there is one scale per index of ``axis`` (per-channel) or, with ``block_size > 0``, one per
    block of ``block_size`` elements along ``axis``. Nothing is inferred from vector lengths.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None
    bits: int = 8
    signed: bool = True
    symmetric: bool = False
    block_size: int = 0

    def __post_init__(self) -> None:
        self.scale = np.ascontiguousarray(self.scale, dtype=np.float32).reshape(-1)
        self.zero_point = np.ascontiguousarray(self.zero_point, dtype=np.int64).reshape(-1)


@dataclass
class Tensor:
    """A named value of a graph: an input, an intermediate, an output or a constant."""

    name: str
    dtype: DataType
    shape: tuple[Dim, ...] | None = None  # None: rank unknown
    data: np.ndarray | None = None  # constants only; storage dtype (see lite.format.dtypes)
    quant: QuantParams | None = None
    doc: str = ""

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclass
class Attribute:
    """A typed node attribute.

    Value per type: FLOAT ``float``; INT ``int``; STRING ``bytes``; TENSOR :class:`Tensor`;
    GRAPH ``int`` (graph index); FLOATS/INTS/STRINGS/TENSORS/GRAPHS: lists of those.
    """

    type: AttributeType
    value: object


@dataclass
class Node:
    op_type: str
    inputs: list[int]
    outputs: list[int]
    attributes: dict[str, Attribute] = field(default_factory=dict)
    domain: str = ""
    name: str = ""


@dataclass
class Graph:
    name: str
    tensors: list[Tensor] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    captures: list[int] = field(default_factory=list)

    def tensor_index(self, name: str) -> int:
        for index, tensor in enumerate(self.tensors):
            if tensor.name == name:
                return index
        raise KeyError(f"graph {self.name!r} has no tensor named {name!r}")


@dataclass
class Model:
    graphs: list[Graph]
    opset_imports: dict[str, int] = field(default_factory=lambda: {"": 21})
    metadata: dict[str, str] = field(default_factory=dict)
    version: tuple[int, int] = FORMAT_VERSION
    # Write the weights' SHA-256 (``weights_sha256``). A model read from a file without one keeps
    # none, so it is written again byte for byte as its writer wrote it.
    weights_checksum: bool = True

    @property
    def main(self) -> Graph:
        return self.graphs[0]


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... whichever ``taken`` lacks; the result is added to ``taken``."""
    name, counter = base, 0
    while name in taken:
        counter += 1
        name = f"{base}_{counter}"
    taken.add(name)
    return name


def reads(model: Model, graph: Graph, nodes: Sequence[Node]) -> set[int]:
    """Indices of ``graph``'s tensors that ``nodes`` read, directly or through their bodies' captures."""
    index_of = {t.name: i for i, t in enumerate(graph.tensors)}
    result = set()
    for node in nodes:
        result.update(i for i in node.inputs if i >= 0)
        for attribute in node.attributes.values():
            if attribute.type == AttributeType.GRAPH:
                bodies = [attribute.value]
            elif attribute.type == AttributeType.GRAPHS:
                bodies = attribute.value
            else:
                continue
            for body_index in bodies:
                body = model.graphs[body_index]
                for captured in body.captures:
                    index = index_of.get(body.tensors[captured].name)
                    if index is not None:
                        result.add(index)
    return result
