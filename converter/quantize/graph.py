"""Editing the main graph of a .lite in-memory model (``lite.format.ir``) for quantization.

Quantization runs after lowering, on the model the runtime will execute: tensors are referred to
by index, so rewrites append tensors and nodes and re-point node inputs. :class:`GraphEditor`
works on a copy (node lists and the tensor table are copied; weight arrays are shared, never
modified), so one float model can be quantized many times (per-layer sensitivity, fallback).
New nodes are placed right after the producer of what they read, or before their reader, so the
node order stays a valid execution order; :meth:`GraphEditor.finish` drops tensors nothing
refers to any more (the float weights that were replaced) and renumbers.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from lite.format import ir as lite_ir
from lite.format.dtypes import DataType
from lite.format.ir import fresh_name


class GraphEditor:
    def __init__(self, model: lite_ir.Model) -> None:
        self.source = model
        main = model.main
        self.tensors: list[lite_ir.Tensor] = list(main.tensors)
        self.nodes: list[lite_ir.Node] = [
            dataclasses.replace(node, inputs=list(node.inputs), outputs=list(node.outputs)) for node in main.nodes
        ]
        self.inputs = list(main.inputs)
        self.outputs = list(main.outputs)
        self.captures = list(main.captures)
        self.names = {tensor.name for tensor in self.tensors}
        # Node names are a namespace of their own, and ONNX Runtime refuses a graph that names two
        # nodes alike: ONNX Runtime's own quantizer names its nodes '<tensor>_QuantizeLinear' too.
        self.node_names = {node.name for node in self.nodes if node.name}
        self.removed: set[int] = set()  # ids of nodes taken out of the graph
        self._after: dict[int, list[lite_ir.Node]] = defaultdict(list)  # id(node) -> nodes placed after it
        self._before: dict[int, list[lite_ir.Node]] = defaultdict(list)
        self._prologue: list[lite_ir.Node] = []
        self._index_producers()

    def _index_producers(self) -> None:
        self.producer: dict[int, lite_ir.Node] = {}
        self.consumers: dict[int, list[lite_ir.Node]] = defaultdict(list)
        for node in self.nodes:
            for index in node.outputs:
                if index >= 0:
                    self.producer[index] = node
            for index in node.inputs:
                if index >= 0 and node not in self.consumers[index]:
                    self.consumers[index].append(node)

    # --- queries --------------------------------------------------------------------------
    def tensor(self, index: int) -> lite_ir.Tensor:
        return self.tensors[index]

    def constant(self, index: int) -> np.ndarray | None:
        """A float32 constant's array (None for anything else)."""
        if index < 0:
            return None
        tensor = self.tensors[index]
        if tensor.data is None or tensor.dtype != DataType.FLOAT or index in self.inputs:
            return None
        return np.asarray(tensor.data)

    def is_activation(self, index: int) -> bool:
        """A float32 value computed at run time (a graph input or a node output)."""
        if index < 0:
            return False
        tensor = self.tensors[index]
        return tensor.data is None and tensor.dtype == DataType.FLOAT and index not in self.captures

    def readers(self, index: int) -> list[lite_ir.Node]:
        return [node for node in self.consumers.get(index, []) if id(node) not in self.removed]

    def is_output(self, index: int) -> bool:
        return index in self.outputs

    # --- edits ----------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """A tensor name no tensor of the graph has (``base`` when free)."""
        return fresh_name(base, self.names)

    def add_tensor(self, base: str, dtype: DataType, shape, data: np.ndarray | None = None,
                   quant: lite_ir.QuantParams | None = None) -> int:
        tensor = lite_ir.Tensor(name=self.unique_name(base), dtype=dtype,
                                shape=None if shape is None else tuple(shape), data=data, quant=quant)
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def add_constant(self, base: str, array: np.ndarray, dtype: DataType,
                     quant: lite_ir.QuantParams | None = None) -> int:
        array = np.asarray(array, order="C")  # keeps 0-d scalars 0-d (ascontiguousarray would not)
        return self.add_tensor(base, dtype, array.shape, array, quant)

    def new_node(self, op_type: str, inputs: list[int], outputs: list[int], name: str,
                 attributes: dict[str, lite_ir.Attribute] | None = None) -> lite_ir.Node:
        """A node named ``name``, or ``name_1``... when a node of the graph has that name."""
        return lite_ir.Node(op_type=op_type, inputs=list(inputs), outputs=list(outputs),
                            attributes=dict(attributes or {}), name=fresh_name(name, self.node_names))

    def place_after_producer(self, index: int, nodes: list[lite_ir.Node]) -> None:
        """Run ``nodes`` right after the node producing tensor ``index`` (first, for graph inputs)."""
        producer = self.producer.get(index)
        if producer is None:
            self._prologue.extend(nodes)
        else:
            self._after[id(producer)].extend(nodes)

    def place_before(self, node: lite_ir.Node, nodes: list[lite_ir.Node]) -> None:
        self._before[id(node)].extend(nodes)

    def redirect(self, old: int, new: int, readers: list[lite_ir.Node] | None = None) -> None:
        """Make ``readers`` (default: every reader of ``old``) read ``new``; graph outputs too when
        no reader list is given. A redirected graph output keeps its name: ``new`` takes it."""
        targets = self.readers(old) if readers is None else readers
        for node in targets:
            node.inputs = [new if index == old else index for index in node.inputs]
            self.consumers[new].append(node)
        if readers is None and old in self.outputs:
            self.outputs = [new if index == old else index for index in self.outputs]
            self.swap_names(old, new)

    def swap_names(self, first: int, second: int) -> None:
        a, b = self.tensors[first], self.tensors[second]
        self.tensors[first] = dataclasses.replace(a, name=b.name)
        self.tensors[second] = dataclasses.replace(b, name=a.name)

    def remove_node(self, node: lite_ir.Node) -> None:
        self.removed.add(id(node))

    def set_quant(self, index: int, quant: lite_ir.QuantParams) -> None:
        self.tensors[index] = dataclasses.replace(self.tensors[index], quant=quant)

    # --- result ---------------------------------------------------------------------------
    def finish(self, opset: int | None = None) -> lite_ir.Model:
        """The edited model: nodes in order, unreferenced tensors dropped, indices renumbered."""
        ordered: list[lite_ir.Node] = list(self._prologue)
        for node in self.nodes:
            ordered.extend(self._before.get(id(node), []))
            if id(node) not in self.removed:
                ordered.append(node)
            ordered.extend(self._after.get(id(node), []))
        used: set[int] = set(self.inputs) | set(self.outputs) | set(self.captures)
        captured = {body.tensors[i].name for body in self.source.graphs[1:] for i in body.captures}
        used.update(i for i, tensor in enumerate(self.tensors) if tensor.name in captured)
        for node in ordered:
            used.update(i for i in node.inputs if i >= 0)
            used.update(i for i in node.outputs if i >= 0)
        keep = sorted(used)
        renumber = {old: new for new, old in enumerate(keep)}

        def remap(indices: list[int]) -> list[int]:
            return [renumber[i] if i >= 0 else -1 for i in indices]

        for node in ordered:
            node.inputs = remap(node.inputs)
            node.outputs = remap(node.outputs)
        source = self.source.main
        main = lite_ir.Graph(
            name=source.name,
            tensors=[self.tensors[i] for i in keep],
            nodes=ordered,
            inputs=remap(self.inputs),
            outputs=remap(self.outputs),
            captures=remap(self.captures),
        )
        opsets = dict(self.source.opset_imports)
        if opset is not None:
            opsets[""] = opset
        return lite_ir.Model(graphs=[main, *self.source.graphs[1:]], opset_imports=opsets,
                             metadata=dict(self.source.metadata), version=self.source.version)


def default_opset(model: lite_ir.Model) -> int:
    imports = model.opset_imports
    return int(imports.get("", imports.get("ai.onnx", 1)))


def int_attribute(node: lite_ir.Node, name: str, default: int) -> int:
    attribute = node.attributes.get(name)
    return default if attribute is None else int(attribute.value)


def float_attribute(node: lite_ir.Node, name: str, default: float) -> float:
    attribute = node.attributes.get(name)
    return default if attribute is None else float(attribute.value)


def describe(node: lite_ir.Node) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} (unnamed)"
