"""ResNet-18 and MobileNetV2 as ONNX graphs, in the shapes real exporters write, built without torch.

Each network comes in four *styles*, one per exporter, as PyTorch 2.13's exporters write them:

``legacy``
    ``torch.onnx.export(..., dynamo=False)``: opset 17, Conv without bias → BatchNormalization,
    ReLU6 as Clip with constant bounds, Flatten → Gemm(transB=1), dynamic batch ``N``.
``dynamo``
    the dynamo exporter with its default optimization: opset 18, BatchNormalization already folded
    (Conv with bias), static batch.
``dynamo_raw``
    the dynamo exporter with ``optimize=False``: opset 18, BatchNormalization kept, every Conv bias
    built by a ``Shape → Expand → Expand`` chain of zeros, Linear as Transpose → MatMul → Add, and
    stray Identity/Dropout nodes.
``mindspore``
    MindSpore's ONNX export: IR 4, opset 11, static batch 1, numeric tensor names, BatchNormalization
    kept, reshape targets as Constant nodes, Dense as MatMul + Add.

Weights are random (He initialisation) and BatchNormalization statistics non-trivial, so a wrong
fold shows up numerically.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STYLES = ("legacy", "dynamo", "dynamo_raw", "mindspore")
_OPSET = {"legacy": 17, "dynamo": 18, "dynamo_raw": 18, "mindspore": 11}


class _Builder:
    def __init__(self, style: str, seed: int) -> None:
        if style not in STYLES:
            raise ValueError(f"style {style!r} is not one of {STYLES}")
        self.style = style
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.counter = 0

    # naming: MindSpore numbers its tensors; torch names them after the module path
    def name(self, hint: str) -> str:
        self.counter += 1
        return str(self.counter) if self.style == "mindspore" else f"{hint}_{self.counter}"

    def weight(self, hint: str, array: np.ndarray) -> str:
        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def constant(self, hint: str, array: np.ndarray) -> str:
        name = self.name(hint)
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(array)))
        return name

    def node(self, op: str, inputs: list[str], hint: str, **attrs) -> str:
        out = self.name(hint)
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"/{hint}/{op}_{self.counter}", **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, groups: int = 1, hint: str = "conv") -> str:
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)
        gamma = self.rng.uniform(0.5, 1.5, cout)
        beta = self.rng.normal(0, 0.1, cout)
        mean = self.rng.normal(0, 0.1, cout)
        var = self.rng.uniform(0.5, 2.0, cout)
        attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [k // 2] * 4, "group": groups}
        if self.style == "dynamo":  # the exporter folded BatchNormalization already
            s = gamma / np.sqrt(var + 1e-5)
            w_name = self.weight(f"{hint}.weight", w * s[:, None, None, None])
            b_name = self.weight(f"{hint}.bias", beta - mean * s)
            return self.node("Conv", [x, w_name, b_name], hint, **attrs)
        w_name = self.weight(f"{hint}.weight", w)
        inputs = [x, w_name]
        if self.style == "dynamo_raw":
            inputs.append(self._zero_bias_chain(w_name, x, hint))
        y = self.node("Conv", inputs, hint, **attrs)
        params = [self.weight(f"{hint}.bn.{p}", v) for p, v in (("weight", gamma), ("bias", beta), ("mean", mean), ("var", var))]
        return self.node("BatchNormalization", [y, *params], f"{hint}.bn", epsilon=1e-5)

    def _zero_bias_chain(self, w_name: str, x: str, hint: str) -> str:
        # torchlib's aten_convolution without bias: zeros expanded to Shape(weight)[0:1]
        dim0 = self.node("Shape", [w_name], f"{hint}.bias", start=0, end=1)
        one = self.constant(f"{hint}.one", np.array([1], dtype=np.int64))
        bias_shape = self.node("Expand", [dim0, one], f"{hint}.bias")
        zero = self.node("CastLike", [self.constant(f"{hint}.zero", np.array(0.0, dtype=np.float32)), x], f"{hint}.bias")
        return self.node("Expand", [zero, bias_shape], f"{hint}.bias")

    def relu(self, x: str, hint: str) -> str:
        return self.node("Relu", [x], hint)

    def relu6(self, x: str, hint: str) -> str:
        low = self.constant(f"{hint}.min", np.array(0.0, dtype=np.float32))
        high = self.constant(f"{hint}.max", np.array(6.0, dtype=np.float32))
        return self.node("Clip", [x, low, high], hint)

    def classifier(self, x: str, features: int, classes: int, dropout: bool) -> str:
        pooled = self.node("GlobalAveragePool", [x], "avgpool")
        if self.style == "mindspore":
            flat = self.node("Reshape", [pooled, self.constant("shape", np.array([1, -1], dtype=np.int64))], "flatten")
        else:
            flat = self.node("Flatten", [pooled], "flatten", axis=1)
        if dropout and self.style == "dynamo_raw":
            flat = self.node("Dropout", [flat], "dropout")
        if self.style == "dynamo_raw":
            flat = self.node("Identity", [flat], "identity")
        w = self.rng.standard_normal((classes, features)) * np.sqrt(1.0 / features)
        b = self.rng.normal(0, 0.1, classes)
        if self.style in ("legacy", "dynamo"):
            return self.node("Gemm", [flat, self.weight("fc.weight", w), self.weight("fc.bias", b)], "fc", transB=1)
        if self.style == "dynamo_raw":
            wt = self.node("Transpose", [self.weight("fc.weight", w)], "fc", perm=[1, 0])
            return self.node("Add", [self.node("MatMul", [flat, wt], "fc"), self.weight("fc.bias", b)], "fc")
        return self.node("Add", [self.node("MatMul", [flat, self.weight("fc.weight", w.T.copy())], "fc"), self.weight("fc.bias", b)], "fc")

    def model(self, image_size: int, classes: int, output: str, graph_name: str) -> onnx.ModelProto:
        batch: int | str = "N" if self.style == "legacy" else 1
        inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, image_size, image_size])]
        # Rename the last tensor to the exporter's output name (MindSpore keeps the number).
        final = self.nodes[-1].output[0]
        out_name = final if self.style == "mindspore" else output
        self.nodes[-1].output[0] = out_name
        outputs = [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, [batch, classes])]
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.initializers)
        ir_version = 4 if self.style == "mindspore" else 8
        producer = "MindSpore" if self.style == "mindspore" else "pytorch"
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", _OPSET[self.style])], ir_version=ir_version, producer_name=producer
        )
        onnx.checker.check_model(model)
        return model


def resnet18(style: str, image_size: int = 64, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(style, seed)
    x = b.relu(b.conv_bn("input", 3, 64, 7, 2, hint="conv1"), "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            hint = f"layer{stage}.{block}"
            y = b.relu(b.conv_bn(x, channels, width, 3, stride, hint=f"{hint}.conv1"), f"{hint}.relu")
            y = b.conv_bn(y, width, width, 3, 1, hint=f"{hint}.conv2")
            shortcut = x
            if stride != 1 or channels != width:
                shortcut = b.conv_bn(x, channels, width, 1, stride, hint=f"{hint}.downsample")
            x = b.relu(b.node("Add", [y, shortcut], f"{hint}.add"), f"{hint}.relu2")
            channels = width
    b.classifier(x, 512, classes, dropout=False)
    return b.model(image_size, classes, "output", "resnet18")


def resnet50(style: str, image_size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 (bottleneck blocks, 25.6 M parameters, ~102 MB of float32 weights)."""
    b = _Builder(style, seed)
    x = b.relu(b.conv_bn("input", 3, 64, 7, 2, hint="conv1"), "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            hint = f"layer{stage}.{block}"
            y = b.relu(b.conv_bn(x, channels, width, 1, 1, hint=f"{hint}.conv1"), f"{hint}.relu1")
            y = b.relu(b.conv_bn(y, width, width, 3, stride, hint=f"{hint}.conv2"), f"{hint}.relu2")
            y = b.conv_bn(y, width, width * 4, 1, 1, hint=f"{hint}.conv3")
            shortcut = x
            if stride != 1 or channels != width * 4:
                shortcut = b.conv_bn(x, channels, width * 4, 1, stride, hint=f"{hint}.downsample")
            x = b.relu(b.node("Add", [y, shortcut], f"{hint}.add"), f"{hint}.relu3")
            channels = width * 4
    b.classifier(x, 2048, classes, dropout=False)
    return b.model(image_size, classes, "output", "resnet50")


# MobileNetV2 inverted residual settings: expansion t, channels c, repeats n, first stride s
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(style: str, image_size: int = 64, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(style, seed)
    x = b.relu6(b.conv_bn("input", 3, 32, 3, 2, hint="features.0"), "features.0.relu6")
    channels = 32
    index = 1
    for t, c, n, s in _MOBILENET_V2:
        for repeat in range(n):
            stride = s if repeat == 0 else 1
            hint = f"features.{index}"
            hidden = channels * t
            y = x
            if t != 1:
                y = b.relu6(b.conv_bn(y, channels, hidden, 1, 1, hint=f"{hint}.expand"), f"{hint}.expand.relu6")
            y = b.relu6(b.conv_bn(y, hidden, hidden, 3, stride, groups=hidden, hint=f"{hint}.dw"), f"{hint}.dw.relu6")
            y = b.conv_bn(y, hidden, c, 1, 1, hint=f"{hint}.project")
            x = b.node("Add", [x, y], f"{hint}.add") if stride == 1 and channels == c else y
            channels = c
            index += 1
    x = b.relu6(b.conv_bn(x, channels, 1280, 1, 1, hint="features.18"), "features.18.relu6")
    b.classifier(x, 1280, classes, dropout=True)
    return b.model(image_size, classes, "output", "mobilenet_v2")


BUILDERS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}  # the acceptance networks
