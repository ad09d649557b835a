"""MINDIR export: the traced graph written as a ``mind_ir.ModelProto`` (schema/mind_ir.proto).

Encoding, after MindSpore's current exporter (``mindir_exporter.cc``; reference §1.4, §1.5):

* each op is a ``NodeProto`` with ``op_type = "REF::<Primitive>:<uid>"`` whose primitive (with
  its attributes) is stored once in ``ModelProto.primitives`` as ``name = "<Primitive>:<uid>"``;
  ``NodeProto.name == output[0] == "<graph>:<Primitive>-op<uid>:<uid>"``, ``domain`` is the scope
  path (``Default/conv1/Conv2D-op3``) and an attribute ``shape`` (TENSORS) gives the output's
  shape and dtype;
* weights are ``GraphProto.parameter`` tensors named ``"<graph>:<parameter name>"`` with inline
  ``raw_data``; real inputs are ``GraphProto.input`` (batch dimension -1); outputs name the
  returned nodes; constants are ``Constant`` nodes with a ``value`` attribute;
* ``mind_ir_version = 1`` (IR_VERSION): primitives keep their attributes as attributes.

Mapping from the traced ONNX-style ops: Conv -> Conv2D (+ BiasAdd), Gemm -> MatMul(transpose_b)
(+ BiasAdd), BatchNormalization -> BatchNorm (is_training=False, momentum = 1 - ours, as MindSpore
hands it to the op; one output: the normalized tensor), Relu -> ReLU, Clip(0, 6) -> ReLU6,
MaxPool/AveragePool -> MaxPool/AvgPool, GlobalAveragePool -> ReduceMean(keep_dims, axis (2, 3)),
Div -> RealDiv, and Add, Sub, Mul, Pow, Exp, Log, Sqrt, Neg, Erf, Sigmoid, Tanh, Flatten, Reshape,
Transpose, ReduceMean, ReduceSum, Concat, MatMul under their MindSpore names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from train._generated import mind_ir_pb2 as pb
from train._trace import TracedNode
from train.checkpoint import atomic_write
from train.errors import ExportError
from train.export.onnx_export import trace
from train.tensor import Tensor

FORMAT_VERSION = "2.10.0"  # the MindSpore release whose format this follows (the loader requires the field)

DATA_TYPES = {
    np.dtype(np.float32): pb.TensorProto.FLOAT,
    np.dtype(np.float16): pb.TensorProto.FLOAT16,
    np.dtype(np.float64): pb.TensorProto.DOUBLE,
    np.dtype(np.int8): pb.TensorProto.INT8,
    np.dtype(np.uint8): pb.TensorProto.UINT8,
    np.dtype(np.int16): pb.TensorProto.INT16,
    np.dtype(np.uint16): pb.TensorProto.UINT16,
    np.dtype(np.int32): pb.TensorProto.INT32,
    np.dtype(np.uint32): pb.TensorProto.UINT32,
    np.dtype(np.int64): pb.TensorProto.INT64,
    np.dtype(np.uint64): pb.TensorProto.UINT64,
    np.dtype(np.bool_): pb.TensorProto.BOOL,
}

SIMPLE = {
    "Relu": "ReLU",
    "Sigmoid": "Sigmoid",
    "Tanh": "Tanh",
    "Erf": "Erf",
    "Exp": "Exp",
    "Log": "Log",
    "Sqrt": "Sqrt",
    "Neg": "Neg",
    "Add": "Add",
    "Sub": "Sub",
    "Mul": "Mul",
    "Div": "RealDiv",
    "Pow": "Pow",
    "Flatten": "Flatten",
}


def attribute(name: str, value: Any, item: bool = False) -> pb.AttributeProto:
    """A primitive attribute as MindSpore's exporter writes it: bool/int in ``i``, tuples and
    lists in ``values``, whose items hold their scalar in the repeated fields (``ints``,
    ``floats``, ``strings``: MindSpore's loader reads items from those, "Parse MindIR attr
    failed" otherwise)."""
    attr = pb.AttributeProto(name=name) if name else pb.AttributeProto()  # tuple items carry no name
    if isinstance(value, bool):
        attr.type = pb.AttributeProto.BOOL
        attr.ints.append(int(value)) if item else setattr(attr, "i", int(value))
    elif isinstance(value, (int, np.integer)):
        attr.type = pb.AttributeProto.INT64
        attr.ints.append(int(value)) if item else setattr(attr, "i", int(value))
    elif isinstance(value, (float, np.floating)):
        attr.type = pb.AttributeProto.FLOAT
        attr.floats.append(float(value)) if item else setattr(attr, "f", float(value))
    elif isinstance(value, str):
        attr.type = pb.AttributeProto.STRING
        attr.strings.append(value.encode()) if item else setattr(attr, "s", value.encode())
    elif isinstance(value, (tuple, list)):
        attr.type = pb.AttributeProto.TUPLE if isinstance(value, tuple) else pb.AttributeProto.LIST
        attr.values.extend(attribute("", v, item=True) for v in value)
    else:
        raise ExportError(f"MINDIR: attribute {name!r} has an unsupported value {value!r}")
    return attr


def tensor_proto(array: np.ndarray, name: str = "", with_data: bool = True) -> pb.TensorProto:
    if array.dtype not in DATA_TYPES:
        raise ExportError(
            f"MINDIR: tensor {name!r} has dtype {array.dtype}, which MINDIR export does not support"
        )
    proto = pb.TensorProto(name=name, dims=list(array.shape), data_type=DATA_TYPES[array.dtype])
    if with_data:
        proto.raw_data = np.ascontiguousarray(array).tobytes()
    return proto


class GraphBuilder:
    def __init__(self, graph_name: str, shapes: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
        self.model = pb.ModelProto(
            ir_version="0.1.1",
            producer_name="lite-train",
            producer_version="0.1.0",
            model_version=FORMAT_VERSION,
            little_endian=True,
            mind_ir_version=pb.IR_VERSION,
        )
        self.graph = self.model.graph
        self.graph.name = graph_name
        self.shapes = shapes
        self.names: dict[str, str] = {}
        self.uid = 0

    def qualified(self, name: str) -> str:
        return f"{self.graph.name}:{name}"

    def node(self, prim: str, inputs: Sequence[str], attrs: dict[str, Any], like: str) -> str:
        """Add ``prim(*inputs)``; ``like`` names the traced tensor whose shape/dtype the output has."""
        self.uid += 1
        output = f"{self.graph.name}:{prim}-op{self.uid}:{self.uid}"
        node = self.graph.node.add(
            input=list(inputs),
            output=[output],
            name=output,
            op_type=f"REF::{prim}:{self.uid}",
            domain=f"Default/{prim}-op{self.uid}",
        )
        dtype, shape = self.shapes[like]
        shape_attr = node.attribute.add(name="shape", type=pb.AttributeProto.TENSORS)
        shape_attr.tensors.add(dims=[-1, *shape[1:]] if shape else [], data_type=DATA_TYPES[dtype])
        self.model.primitives.add(
            name=f"{prim}:{self.uid}",
            op_type=prim,
            instance_name=f"{prim}-op{self.uid}",
            attribute=[attribute(k, v) for k, v in attrs.items()],
            prim_type=pb.PrimitiveProto.PRIMITIVE,
        )
        return output

    def index(self, value: int) -> str:
        """A scalar int64 Constant node (a TupleGetItem's index), as MindSpore writes one."""
        self.uid += 1
        output = f"{self.graph.name}:Constant-op{self.uid}:{self.uid}"
        node = self.graph.node.add(output=[output], name=output, op_type="Constant")
        node.attribute.add(name="value", type=pb.AttributeProto.INT64, i=value)
        return output

    def ints(self, values: Sequence[int]) -> str:
        """A tuple of ints as a Constant node (axes, a shape, a permutation), as MindSpore writes one."""
        self.uid += 1
        output = f"{self.graph.name}:Constant-op{self.uid}:{self.uid}"
        node = self.graph.node.add(output=[output], name=output, op_type="Constant")
        node.attribute.append(attribute("value", tuple(int(v) for v in values)))
        return output

    def constant(self, array: np.ndarray) -> str:
        """A tensor constant, as a parameter of the graph: MindSpore's loader takes scalars and
        tuples as Constant nodes but not tensors ("Obtain attr in scalar-form has not support
        input type: 17")."""
        self.uid += 1
        output = f"{self.graph.name}:const{self.uid}"
        self.graph.parameter.append(tensor_proto(np.asarray(array), output))
        return output


def _pads(onnx_pads: Sequence[int]) -> tuple[int, int, int, int]:
    top, left, bottom, right = onnx_pads
    return top, bottom, left, right


def _emit(b: GraphBuilder, node: TracedNode, args: list[str], consts: dict[str, np.ndarray]) -> str:
    op, attrs, out = node.op_type, node.attrs, node.outputs[0]
    if op in SIMPLE:
        return b.node(SIMPLE[op], args, {}, out)
    if op == "Conv":
        kh, kw = attrs["kernel_shape"]
        weight_shape = b.shapes[node.inputs[1]][1]
        conv = b.node(
            "Conv2D",
            args[:2],
            {
                "out_channel": weight_shape[0],
                "kernel_size": (kh, kw),
                "mode": 1,
                "pad_mode": "pad",
                "pad": _pads(attrs["pads"]),
                "stride": (1, 1, *attrs["strides"]),
                "dilation": (1, 1, *attrs["dilations"]),
                "group": attrs["group"],
                "groups": attrs["group"],
                "data_format": "NCHW",
                "format": "NCHW",
                "pad_list": _pads(attrs["pads"]),
                "input_names": ["x", "w"],
                "output_names": ["output"],
            },
            out,
        )
        return b.node("BiasAdd", [conv, args[2]], {"data_format": "NCHW", "format": "NCHW"}, out) if len(args) > 2 else conv
    if op in ("Gemm", "MatMul"):
        product = b.node(
            "MatMul", args[:2], {"transpose_a": False, "transpose_b": bool(attrs.get("transB", 0))}, out
        )
        return (
            b.node("BiasAdd", [product, args[2]], {"data_format": "NCHW", "format": "NCHW"}, out) if len(args) > 2 else product
        )
    if op == "BatchNormalization":
        normalized = b.node(
            "BatchNorm",
            args,
            {
                "is_training": False,
                "epsilon": attrs["epsilon"],
                "momentum": 1.0 - attrs["momentum"],
                "data_format": "NCHW",
                "format": "NCHW",
            },
            out,
        )
        # MindSpore's BatchNorm gives (y, mean, variance, saved mean, saved variance); y is item 0.
        return b.node("TupleGetItem", [normalized, b.index(0)], {}, out)
    if op in ("MaxPool", "AveragePool"):
        prim = "MaxPool" if op == "MaxPool" else "AvgPool"
        return b.node(
            prim,
            args,
            {
                "kernel_size": (1, 1, *attrs["kernel_shape"]),
                "strides": (1, 1, *attrs["strides"]),
                "pad_mode": "SAME" if any(attrs["pads"]) else "VALID",
                "data_format": "NCHW",
                "format": "NCHW",
            },
            out,
        )
    if op == "GlobalAveragePool":
        return b.node(
            "ReduceMean", [args[0], b.ints([2, 3])], {"keep_dims": True}, out
        )
    if op in ("ReduceMean", "ReduceSum"):
        axes = attrs.get("axes") if op == "ReduceMean" else consts[node.inputs[1]].tolist()
        return b.node(
            op, [args[0], b.ints(axes)], {"keep_dims": bool(attrs["keepdims"])}, out
        )
    if op == "Clip":
        low, high = (float(consts[n]) for n in node.inputs[1:3])
        if (low, high) != (0.0, 6.0):
            raise ExportError(
                f"MINDIR: Clip({low}, {high}) has no MindSpore primitive here; only ReLU6 is supported"
            )
        return b.node("ReLU6", args[:1], {}, out)
    if op == "Reshape":
        target = consts[node.inputs[1]].tolist()
        if target and target[0] == 0:
            if -1 in target:
                raise ExportError(
                    "MINDIR: Reshape with both a dynamic batch and -1 cannot be expressed; use Flatten"
                )
            target[0] = -1
        return b.node("Reshape", [args[0], b.ints(target)], {}, out)
    if op == "Transpose":
        return b.node("Transpose", [args[0], b.ints(attrs["perm"])], {}, out)
    if op == "Concat":
        return b.node("Concat", args, {"axis": attrs["axis"]}, out)
    raise ExportError(f"MINDIR export does not support the op {op}; export to ONNX instead")


def build_model(net: Any, inputs: Sequence[Any]) -> pb.ModelProto:
    tracer, input_names, input_tensors, outputs = trace(net, inputs)
    shapes = {}
    for value in tracer.keep:
        if isinstance(value, Tensor) and id(value) in tracer.names:
            shapes[tracer.names[id(value)]] = (value.dtype, value.shape)
    for name, array in tracer.initializers.items():
        shapes[name] = (array.dtype, array.shape)
    builder = GraphBuilder(f"{type(net).__name__}_construct", shapes)
    graph = builder.graph
    for name, tensor in zip(input_names, input_tensors):
        info = graph.input.add(name=builder.qualified(name))
        info.tensor.add(dims=[-1, *tensor.shape[1:]], data_type=DATA_TYPES[tensor.dtype])
        builder.names[name] = builder.qualified(name)
    constants = {n: a for n, a in tracer.initializers.items() if n not in tracer.parameters}
    for name in sorted(tracer.parameters):
        graph.parameter.append(tensor_proto(tracer.initializers[name], builder.qualified(name)))
        builder.names[name] = builder.qualified(name)
    for node in tracer.nodes:
        args = []
        for name in node.inputs:
            if name == "":
                continue
            if name not in builder.names:  # a constant met for the first time
                builder.names[name] = builder.constant(constants[name])
            args.append(builder.names[name])
        builder.names[node.outputs[0]] = _emit(builder, node, args, constants)
    for value in outputs:
        traced = tracer.names[id(value)]
        info = graph.output.add(name=builder.names[traced])
        info.tensor.add(dims=[-1, *value.shape[1:]], data_type=DATA_TYPES[value.dtype])
    _drop_unused_constants(graph)
    return builder.model


def _drop_unused_constants(graph: pb.GraphProto) -> None:
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    keep = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in used]
    del graph.node[:]
    graph.node.extend(keep)


def export_mindir(net: Any, inputs: Sequence[Any], path: Path) -> Path:
    if not inputs:
        raise ExportError("export needs at least one sample input: export(net, Tensor(x), file_name=...)")
    atomic_write(path, build_model(net, inputs).SerializeToString())
    return path
