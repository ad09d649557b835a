"""Real PyTorch exports of ResNet-18 and MobileNetV2 (plain torch.nn; there is no torchvision).

Skipped when torch is not installed; the dynamo exporter also needs onnxscript. Marked slow: the
dynamo exporter takes seconds per model.
"""

from __future__ import annotations

import onnx
import pytest

import converter

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.slow


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for stage, width in enumerate((64, 128, 256, 512)):
            for k in range(2):
                blocks.append(BasicBlock(cin, width, 2 if stage and not k else 1))
                cin = width
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def _conv_bn(cin, cout, k, stride, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        hidden = cin * t
        layers = [] if t == 1 else [_conv_bn(cin, hidden, 1, 1)]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers, cin = [_conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for k in range(n):
                layers.append(InvertedResidual(cin, c, s if k == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def _randomized(network: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for module in network.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.2, 0.2)
    return network.eval()


NETWORKS = {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2}
GONE = {"BatchNormalization", "Identity", "Dropout", "Shape", "Expand"}


def _export(network: str, how: str, path) -> None:
    model = _randomized(NETWORKS[network]())
    example = (torch.randn(1, 3, 64, 64),)
    if how == "legacy":
        torch.onnx.export(model, example, path, dynamo=False, opset_version=17, input_names=["input"], output_names=["output"])
        return
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    program = torch.onnx.export(model, example, dynamo=True, optimize=(how == "dynamo"), verbose=False)
    program.save(str(path))


@pytest.mark.parametrize(
    "network, how",
    [("resnet18", "legacy"), ("mobilenet_v2", "legacy"), ("resnet18", "dynamo_raw"), ("mobilenet_v2", "dynamo_raw"), ("resnet18", "dynamo")],
)
def test_real_export_converts(network, how, tmp_path):
    source = tmp_path / f"{network}_{how}.onnx"
    _export(network, how, source)
    report = converter.convert(source, tmp_path / "out.onnx", rtol=1e-4)
    remaining = {node.op_type for node in onnx.load(tmp_path / "out.onnx").graph.node}
    assert not remaining & GONE, remaining & GONE
    assert report.verification.passed, report.verification.to_dict()
    lite_report = converter.convert(source, tmp_path / "out.lite", rtol=1e-4)
    assert lite_report.verification.passed
