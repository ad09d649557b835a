"""ONNX export: checked models, opset/IR stamps, dynamic batch, BatchNormalization kept, ORT parity."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from train import ExportError, Tensor, export, nn, set_seed
from train.models import LeNet5, resnet18, resnet50


def run_onnx(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


def trained_like(net):
    """Give BatchNorm non-trivial statistics so that BN export is actually exercised."""
    rng = np.random.default_rng(0)
    for param in net.get_parameters():
        if param.name.endswith(("moving_mean", "beta")):
            param.set_data(rng.standard_normal(param.shape).astype(np.float32) * 0.1)
        elif param.name.endswith(("moving_variance", "gamma")):
            param.set_data(rng.random(param.shape).astype(np.float32) + 0.5)
    return net


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: LeNet5(), (1, 32, 32)),
        (lambda: trained_like(resnet18(num_classes=10, in_channels=3, width=8)), (3, 64, 64)),
        (
            lambda: trained_like(resnet18(num_classes=10, in_channels=1, width=8, small_input=True)),
            (1, 16, 16),
        ),
        (lambda: trained_like(resnet50(num_classes=10, in_channels=3, width=4)), (3, 32, 32)),
    ],
)
def test_exported_networks_match_onnxruntime(tmp_path, make, shape):
    set_seed(0)
    net = make()
    rng = np.random.default_rng(1)
    path = export(
        net,
        Tensor(rng.standard_normal((2, *shape)).astype(np.float32)),
        file_name=tmp_path / "net",
        file_format="ONNX",
    )
    assert path == tmp_path / "net.onnx"
    for batch in (1, 5):  # dynamic batch: other sizes than the traced one
        x = rng.standard_normal((batch, *shape)).astype(np.float32)
        # float32 through ~50 layers: summation order differs between the training core (numpy's
        # BLAS) and ONNX Runtime's kernels, and between CPUs (AVX2 and AVX-512 FMA blocking), so
        # a few elements drift past 1e-5 relative on some machines.
        np.testing.assert_allclose(run_onnx(path, x), net(Tensor(x)).asnumpy(), rtol=1e-4, atol=1e-5)


def test_model_stamps_names_and_batchnorm_kept(tmp_path):
    net = trained_like(resnet18(num_classes=10, in_channels=1, width=4, small_input=True))
    path = export(net, Tensor(np.zeros((1, 1, 8, 8), np.float32)), file_name=str(tmp_path / "r.onnx"))
    assert path.name == "r.onnx"
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("BatchNormalization") == len(
        [n for n, c in net.cells_and_names() if isinstance(c, nn.BatchNorm2d)]
    )
    assert {"Conv", "Relu", "Add", "GlobalAveragePool", "Flatten", "Gemm"} <= set(ops)
    initializers = {i.name for i in model.graph.initializer}
    assert {"conv1.weight", "bn1.gamma", "bn1.moving_mean", "end_point.weight"} <= initializers
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch"
    assert model.graph.output[0].name == "output"


def test_export_keeps_the_training_mode_and_gelu_exports(tmp_path):
    net = nn.SequentialCell([nn.Dense(4, 6), nn.GELU(), nn.Dense(6, 3), nn.GELU(False), nn.BatchNorm1d(3)])
    trained_like(net)
    net.set_train(True)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    path = export(net, Tensor(x), file_name=tmp_path / "mlp")
    assert net.training
    net.set_train(False)
    np.testing.assert_allclose(run_onnx(path, x), net(Tensor(x)).asnumpy(), rtol=1e-5, atol=1e-5)


def test_pooling_variants_export(tmp_path):
    net = nn.SequentialCell(
        [
            nn.Conv2d(2, 4, 3, stride=2, pad_mode="same", has_bias=True),
            nn.ReLU6(),
            nn.MaxPool2d(3, 2, pad_mode="same"),
            nn.AvgPool2d(2, 1),
            nn.Sigmoid(),
            nn.Flatten(),
        ]
    )
    x = np.random.default_rng(0).standard_normal((2, 2, 17, 15)).astype(np.float32)
    path = export(net, Tensor(x), file_name=tmp_path / "pools")
    np.testing.assert_allclose(run_onnx(path, x), net(Tensor(x)).asnumpy(), rtol=1e-5, atol=1e-6)


def test_bad_export_requests(tmp_path):
    with pytest.raises(ExportError, match="file_format"):
        export(
            LeNet5(),
            Tensor(np.zeros((1, 1, 32, 32), np.float32)),
            file_name=tmp_path / "x",
            file_format="AIR",
        )
    with pytest.raises(ExportError, match="sample input"):
        export(LeNet5(), file_name=tmp_path / "x")

    class Indexing(nn.Cell):
        def construct(self, x):
            return x[:, :2]

    with pytest.raises(ExportError, match="indexing"):
        export(Indexing(), Tensor(np.zeros((1, 4), np.float32)), file_name=tmp_path / "x")
