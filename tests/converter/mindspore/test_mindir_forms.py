"""MINDIR encodings MindSpore 2.10 on CPU does not produce, built with the project's own writers
(clearly not MindSpore output): the 1.x form (bare op types, attributes on nodes), the train
core's export (BatchNorm with one output, no TupleGetItem), NHWC Conv2D/BiasAdd/BatchNorm
(MindSpore's CPU backend refuses NHWC), and the handling of unknown primitives."""

from __future__ import annotations

import numpy as np
import pytest

import converter
from converter.mindspore import mindir_to_onnx
from tests.converter.mindspore.helpers import FIXTURES, assert_close, run_lite
from tests.converter.mindspore.networks import small_resnet
from train import Tensor, set_seed
from train._generated import mind_ir_pb2 as pb
from train.export.mindir_export import attribute, build_model, tensor_proto
from train.models import LeNet5


def _train_export(net, x):
    net.set_train(False)
    return build_model(net, [Tensor(x)]), net(Tensor(x)).data


def _to_1x(model: pb.ModelProto) -> pb.ModelProto:
    """The 1.x encoding: op_type is the bare primitive name, attributes sit on the node."""
    prims = {p.name: p for p in model.primitives}
    for node in model.graph.node:
        if node.op_type.startswith("REF::"):
            prim = prims[node.op_type[5:]]
            node.op_type = prim.op_type
            node.attribute.extend(prim.attribute)
    del model.primitives[:]
    model.mind_ir_version = 0
    return model


def _convert_bytes(model: pb.ModelProto, tmp_path, **options):
    source = tmp_path / "model.mindir"
    source.write_bytes(model.SerializeToString())
    output = tmp_path / "model.lite"
    converter.convert(source, output, verify=False, **options)
    return output


@pytest.mark.parametrize("form", ["2.x", "1.x"])
def test_train_core_export_batchnorm_through_its_first_output(form, tmp_path):
    set_seed(3)
    net = small_resnet()
    for name, param in net.parameters_dict().items():  # non-trivial BatchNorm statistics
        if name.endswith("moving_variance"):
            param.set_data(np.random.default_rng(1).uniform(0.5, 2, param.shape).astype(np.float32))
        elif name.endswith("moving_mean"):
            param.set_data(np.random.default_rng(2).normal(0, 0.5, param.shape).astype(np.float32))
    x = np.random.default_rng(0).normal(size=(2, 3, 16, 16)).astype(np.float32)
    model, want = _train_export(net, x)
    assert any("TupleGetItem" in p.op_type for p in model.primitives)  # BatchNorm's y, as MindSpore reads it
    if form == "1.x":
        model = _to_1x(model)
    assert_close(run_lite(_convert_bytes(model, tmp_path), x), [want])


def test_lenet_1x_form(tmp_path):
    set_seed(5)
    x = np.random.default_rng(0).normal(size=(1, 1, 32, 32)).astype(np.float32)
    model, want = _train_export(LeNet5(), x)
    assert_close(run_lite(_convert_bytes(_to_1x(model), tmp_path), x), [want])


def _nhwc_model(rng, dilation: int = 1) -> tuple[pb.ModelProto, dict[str, np.ndarray]]:
    weights = {
        "w": rng.normal(size=(4, 3, 3, 3)).astype(np.float32),  # (out, kh, kw, in) in NHWC
        "b": rng.normal(size=4).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        "beta": rng.normal(size=4).astype(np.float32),
        "mean": rng.normal(size=4).astype(np.float32),
        "var": rng.uniform(0.5, 2, 4).astype(np.float32),
    }
    model = pb.ModelProto(producer_name="lite-tests", model_version="2.10.0", little_endian=True, mind_ir_version=1)
    graph = model.graph
    graph.name = "g"
    graph.input.add(name="g:x").tensor.add(dims=[1, 5, 6, 3], data_type=pb.TensorProto.FLOAT)
    for name, array in weights.items():
        graph.parameter.append(tensor_proto(array, f"g:{name}"))

    def node(uid, prim, inputs, attrs, dims):
        out = f"g:{prim}:{uid}"
        n = graph.node.add(input=inputs, output=[out], name=out, op_type=f"REF::{prim}:{uid}")
        n.attribute.add(name="shape", type=pb.AttributeProto.TENSORS).tensors.add(dims=dims, data_type=1)
        model.primitives.add(name=f"{prim}:{uid}", op_type=prim, attribute=[attribute(k, v) for k, v in attrs.items()])
        return out

    conv_attrs = {"pad_mode": "same", "stride": (1, 1, 1, 1), "dilation": (1, dilation, dilation, 1), "group": 1,
                  "kernel_size": (3, 3), "format": "NHWC"}
    conv = node(1, "Conv2D", ["g:x", "g:w"], conv_attrs, [1, 5, 6, 4])
    biased = node(2, "BiasAdd", [conv, "g:b"], {"data_format": "NHWC"}, [1, 5, 6, 4])
    bn = node(3, "BatchNorm", [biased, "g:gamma", "g:beta", "g:mean", "g:var"],
              {"is_training": False, "epsilon": 1e-3, "data_format": "NHWC"}, [1, 5, 6, 4])
    item = node(4, "TupleGetItem", [bn, "g:zero"], {}, [1, 5, 6, 4])
    zero = graph.node.add(output=["g:zero"], name="g:zero", op_type="Constant")
    zero.attribute.add(name="value", type=pb.AttributeProto.INT64, i=0)
    graph.output.add(name=item)
    return model, weights


def test_nhwc_conv_biasadd_batchnorm(tmp_path):
    rng = np.random.default_rng(7)
    model, w = _nhwc_model(rng)
    x = rng.normal(size=(1, 5, 6, 3)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = np.zeros((1, 5, 6, 4))
    for i in range(5):
        for j in range(6):
            conv[0, i, j] = np.einsum("hwc,ohwc->o", padded[0, i : i + 3, j : j + 3], w["w"])
    y = (conv + w["b"] - w["mean"]) / np.sqrt(w["var"] + 1e-3) * w["gamma"] + w["beta"]
    assert_close(run_lite(_convert_bytes(model, tmp_path), x), [y.astype(np.float32)])


def test_a_dilated_same_conv_runs_on_onnx_runtime_too(tmp_path):
    """MindSpore's pad_mode "same" with a dilation: written as auto_pad SAME_UPPER, which ONNX
    Runtime refuses with a dilation, so device="cpu" could not run the converted file."""
    import lite

    rng = np.random.default_rng(8)
    model, w = _nhwc_model(rng, dilation=2)
    x = rng.normal(size=(1, 5, 6, 3)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (2, 2), (2, 2), (0, 0)))
    conv = np.zeros((1, 5, 6, 4))
    for i in range(5):
        for j in range(6):
            conv[0, i, j] = np.einsum("hwc,ohwc->o", padded[0, i : i + 5 : 2, j : j + 5 : 2], w["w"])
    y = ((conv + w["b"] - w["mean"]) / np.sqrt(w["var"] + 1e-3) * w["gamma"] + w["beta"]).astype(np.float32)
    path = _convert_bytes(model, tmp_path)
    assert_close(run_lite(path, x), [y])
    pytest.importorskip("onnxruntime")
    on_ort = lite.Model.load(path, device="cpu")
    assert_close(list(on_ort.predict({on_ort.inputs[0].name: x}).values()), [y])


def test_control_flow_is_named_as_such_not_as_a_damaged_file(tmp_path):
    """A Partial of a sub-graph (MindSpore's if on a tensor's value) read as a value no node makes."""
    model, _ = _nhwc_model(np.random.default_rng(9))
    model.functions.add(name="g_branch_true")
    partial = model.graph.node.add(input=["g_branch_true"], output=["g:Partial:9"], name="g:Partial:9",
                                   op_type="REF::Partial:9")
    model.primitives.add(name="Partial:9", op_type="Partial")
    model.graph.output.add(name=partial.output[0])
    source = tmp_path / "control_flow.mindir"
    source.write_bytes(model.SerializeToString())
    with pytest.raises(converter.UnsupportedOpsError, match="sub-graph 'g_branch_true' \\(control flow"):
        converter.convert_model(source)


def _rename_primitives(renames: dict[str, str]) -> pb.ModelProto:
    model = pb.ModelProto()
    model.ParseFromString((FIXTURES / "ops_activations.mindir").read_bytes())
    for prim in model.primitives:
        prim.op_type = renames.get(prim.op_type, prim.op_type)
    return model


def test_unknown_primitives_are_listed_at_once(tmp_path):
    source = tmp_path / "unknown.mindir"
    source.write_bytes(_rename_primitives({"GeLU": "FancyGeLU", "HSwish": "FancySwish"}).SerializeToString())
    with pytest.raises(converter.UnsupportedOpsError) as caught:
        converter.convert_model(source)
    assert sorted(op for _, op, _ in caught.value.unsupported) == ["FancyGeLU", "FancySwish"]
    assert "--allow-custom" in str(caught.value)


def test_unknown_primitives_kept_as_custom_nodes(tmp_path):
    source = tmp_path / "unknown.mindir"
    source.write_bytes(_rename_primitives({"GeLU": "FancyGeLU"}).SerializeToString())
    proto, facts = mindir_to_onnx(source, allow_custom=True)
    custom = [n for n in proto.graph.node if n.domain == "mindspore"]
    assert [n.op_type for n in custom] == ["FancyGeLU"] and "FancyGeLU" in facts["custom"]
    report = converter.convert(source, tmp_path / "custom.lite", verify=False, allow_custom=True)
    assert [op for _, op, _ in report.custom_ops] == ["FancyGeLU"]


def test_training_mode_batchnorm_is_refused(tmp_path):
    set_seed(1)
    model, _ = _train_export(small_resnet(), np.zeros((1, 3, 8, 8), np.float32))
    for prim in model.primitives:
        if prim.op_type == "BatchNorm":
            for attr in prim.attribute:
                if attr.name == "is_training":
                    attr.i = 1
    source = tmp_path / "train_mode.mindir"
    source.write_bytes(model.SerializeToString())
    with pytest.raises(converter.UnsupportedOpsError, match="set_train\\(False\\)"):
        converter.convert_model(source)
