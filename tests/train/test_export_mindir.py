"""MINDIR export: structure per the MindSpore format facts, and numerics through a small reader."""

from __future__ import annotations

import numpy as np
import pytest

from train import ExportError, Parameter, Tensor, export, nn, ops, set_seed
from train._generated import mind_ir_pb2 as pb
from train.models import LeNet5, resnet18

DTYPES = {pb.TensorProto.FLOAT: np.float32, pb.TensorProto.DOUBLE: np.float64, pb.TensorProto.INT64: np.int64}


def decode(attr):
    if attr.type in (pb.AttributeProto.TUPLE, pb.AttributeProto.LIST):
        return tuple(decode(v) for v in attr.values)
    for items in (attr.ints, attr.floats, attr.strings):  # a tuple's item holds its scalar here
        if len(items):
            return items[0].decode() if isinstance(items[0], bytes) else items[0]
    if attr.type == pb.AttributeProto.STRING:
        return attr.s.decode()
    if attr.type == pb.AttributeProto.FLOAT:
        return attr.f
    if attr.type == pb.AttributeProto.BOOL:
        return bool(attr.i)
    if attr.type == pb.AttributeProto.TENSOR:
        return np.frombuffer(attr.t.raw_data, DTYPES[attr.t.data_type]).reshape(tuple(attr.t.dims))
    return attr.i


def run_mindir(model, x):
    """A minimal MINDIR interpreter for the primitives LeNet and ResNet use, built on train.ops."""
    values = {model.graph.input[0].name: Tensor(x)}
    for p in model.graph.parameter:
        values[p.name] = Tensor(np.frombuffer(p.raw_data, DTYPES[p.data_type]).reshape(tuple(p.dims)))
    prims = {p.name: (p.op_type, {a.name: decode(a) for a in p.attribute}) for p in model.primitives}
    for node in model.graph.node:
        if node.op_type == "Constant":
            values[node.output[0]] = decode(node.attribute[0])
            continue
        prim, attrs = prims[node.op_type[len("REF::") :]]
        args = [values[name] for name in node.input]
        if prim == "TupleGetItem":  # of BatchNorm, whose y this interpreter keeps alone
            assert args[1] == 0
            values[node.output[0]] = args[0]
            continue
        if prim == "Conv2D":
            top, bottom, left, right = attrs["pad"]
            out = ops.conv2d(
                args[0],
                args[1],
                None,
                attrs["stride"][2:],
                (top, bottom, left, right),
                attrs["dilation"][2:],
                attrs["group"],
            )
        elif prim == "BiasAdd":
            bias = args[1].data.reshape((1, -1) + (1,) * (args[0].ndim - 2))
            out = Tensor(args[0].data + bias)
        elif prim == "BatchNorm":
            x_, scale, shift, mean, var = (a.data for a in args)
            view = (1, -1) + (1,) * (x_.ndim - 2)
            out = Tensor(
                (x_ - mean.reshape(view))
                / np.sqrt(var.reshape(view) + attrs["epsilon"])
                * scale.reshape(view)
                + shift.reshape(view)
            )
        elif prim == "ReLU":
            out = ops.relu(args[0])
        elif prim == "MaxPool":
            pads = ops.resolve_pads(
                attrs["pad_mode"].lower(),
                0,
                args[0].shape[2:],
                attrs["kernel_size"][2:],
                attrs["strides"][2:],
                (1, 1),
            )
            out = ops.max_pool2d(args[0], attrs["kernel_size"][2:], attrs["strides"][2:], pads)
        elif prim == "Add":
            out = args[0] + args[1]
        elif prim == "ReduceMean":
            out = ops.reduce_mean(args[0], tuple(args[1]), attrs["keep_dims"])
        elif prim == "Flatten":
            out = ops.flatten(args[0])
        elif prim == "MatMul":
            right = args[1].data.T if attrs["transpose_b"] else args[1].data
            out = Tensor(args[0].data @ right)
        else:
            raise AssertionError(f"unexpected primitive {prim}")
        values[node.output[0]] = out
    return values[model.graph.output[0].name].asnumpy()


def load(path):
    model = pb.ModelProto()
    model.ParseFromString(path.read_bytes())
    return model


@pytest.mark.parametrize(
    "make, shape",
    [
        (LeNet5, (1, 32, 32)),
        (lambda: resnet18(num_classes=10, in_channels=3, width=4), (3, 32, 32)),
    ],
)
def test_mindir_round_trip_numerics(tmp_path, make, shape):
    set_seed(0)
    net = make()
    for param in net.get_parameters():  # non-trivial BatchNorm statistics
        if param.name.endswith("moving_variance"):
            param.set_data(np.full(param.shape, 1.5, np.float32))
    x = np.random.default_rng(0).standard_normal((3, *shape)).astype(np.float32)
    path = export(net, Tensor(x[:1]), file_name=tmp_path / "net", file_format="MINDIR")
    assert path.suffix == ".mindir"
    np.testing.assert_allclose(run_mindir(load(path), x), net(Tensor(x)).asnumpy(), rtol=1e-5, atol=1e-5)


def test_mindir_structure_follows_the_format_facts(tmp_path):
    net = resnet18(num_classes=10, in_channels=1, width=4, small_input=True)
    model = load(
        export(
            net, Tensor(np.zeros((1, 1, 8, 8), np.float32)), file_name=tmp_path / "r", file_format="mindir"
        )
    )
    assert model.ir_version == "0.1.1" and model.producer_name and model.model_version
    assert model.little_endian and model.mind_ir_version == pb.IR_VERSION
    graph = model.graph
    prefix = graph.name + ":"
    # The weights, and tensor constants (MindSpore's loader takes no tensor in a Constant node).
    assert {p.name for p in graph.parameter} - {prefix + n for n in net.parameters_dict()} == {
        p.name for p in graph.parameter if p.name.startswith(prefix + "const")}
    assert {prefix + n for n in net.parameters_dict()} <= {p.name for p in graph.parameter}
    assert graph.input[0].name == prefix + "input" and list(graph.input[0].tensor[0].dims) == [-1, 1, 8, 8]
    primitives = {p.name: p for p in model.primitives}
    for node in graph.node:
        assert node.name == node.output[0]
        if node.op_type == "Constant":
            assert node.attribute[0].name == "value"
            continue
        assert node.op_type.startswith("REF::")
        prim = primitives[node.op_type[len("REF::") :]]
        assert prim.prim_type == pb.PrimitiveProto.PRIMITIVE
        assert node.attribute[0].name == "shape" and node.attribute[0].type == pb.AttributeProto.TENSORS
    kinds = [primitives[n.op_type[5:]].op_type for n in graph.node if n.op_type.startswith("REF::")]
    batch_norms = [c for _, c in net.cells_and_names() if isinstance(c, nn.BatchNorm2d)]
    assert kinds.count("BatchNorm") == len(batch_norms) == 20 and "Conv2D" in kinds and "MatMul" in kinds
    conv = next(p for p in model.primitives if p.op_type == "Conv2D")
    attrs = {a.name: a for a in conv.attribute}
    assert attrs["pad_mode"].s == b"pad" and len(attrs["stride"].values) == 4
    assert graph.output[0].name in {n.output[0] for n in graph.node}


def test_mindir_rejects_ops_it_cannot_express(tmp_path):
    class Unflatten(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(np.ones(3, np.float32))

        def construct(self, x):
            return ops.reshape(x * self.w, (2, -1, 1))

    with pytest.raises(ExportError, match="Reshape"):
        export(
            Unflatten(), Tensor(np.ones((2, 3), np.float32)), file_name=tmp_path / "c", file_format="MINDIR"
        )
