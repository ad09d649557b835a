"""ResNet-18/34/50 with MindSpore model-zoo parameter names
(``models/official/cv/ResNet/src/resnet.py``): ``conv1``, ``bn1``, ``layer1.0.conv1``,
``layer1.0.down_sample_layer.0``, ``end_point``.

``width`` scales every stage (64 is the standard network); ``small_input=True`` replaces the
7x7/stride-2 stem and its max-pool with one 3x3/stride-1 convolution, for 8x8 to 32x32 images.
"""

from __future__ import annotations

from train import nn
from train.tensor import Tensor


def _conv(in_c: int, out_c: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(
        in_c, out_c, kernel, stride=stride, pad_mode="pad", padding=kernel // 2, weight_init="he_normal"
    )


class ResidualBlockBase(nn.Cell):
    """Basic block (ResNet-18/34): two 3x3 convolutions."""

    expansion = 1

    def __init__(self, in_channel: int, out_channel: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv(in_channel, out_channel, 3, stride)
        self.bn1 = nn.BatchNorm2d(out_channel)
        self.conv2 = _conv(out_channel, out_channel, 3)
        self.bn2 = nn.BatchNorm2d(out_channel)
        self.relu = nn.ReLU()
        self.down_sample = stride != 1 or in_channel != out_channel
        if self.down_sample:
            self.down_sample_layer = nn.SequentialCell(
                _conv(in_channel, out_channel, 1, stride), nn.BatchNorm2d(out_channel)
            )

    def construct(self, x: Tensor) -> Tensor:
        identity = self.down_sample_layer(x) if self.down_sample else x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResidualBlock(nn.Cell):
    """Bottleneck block (ResNet-50): 1x1 reduce, 3x3, 1x1 expand (x4)."""

    expansion = 4

    def __init__(self, in_channel: int, out_channel: int, stride: int = 1) -> None:
        super().__init__()
        channel = out_channel // self.expansion
        self.conv1 = _conv(in_channel, channel, 1)
        self.bn1 = nn.BatchNorm2d(channel)
        self.conv2 = _conv(channel, channel, 3, stride)
        self.bn2 = nn.BatchNorm2d(channel)
        self.conv3 = _conv(channel, out_channel, 1)
        self.bn3 = nn.BatchNorm2d(out_channel)
        self.relu = nn.ReLU()
        self.down_sample = stride != 1 or in_channel != out_channel
        if self.down_sample:
            self.down_sample_layer = nn.SequentialCell(
                _conv(in_channel, out_channel, 1, stride), nn.BatchNorm2d(out_channel)
            )

    def construct(self, x: Tensor) -> Tensor:
        identity = self.down_sample_layer(x) if self.down_sample else x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Cell):
    def __init__(
        self,
        block: type[nn.Cell],
        layer_nums: list[int],
        num_classes: int = 10,
        in_channels: int = 3,
        width: int = 64,
        small_input: bool = False,
    ) -> None:
        super().__init__()
        self.small_input = small_input
        if small_input:
            self.conv1 = _conv(in_channels, width, 3)
        else:
            self.conv1 = nn.Conv2d(
                in_channels, width, 7, stride=2, pad_mode="pad", padding=3, weight_init="he_normal"
            )
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        if not small_input:
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        expansion = block.expansion  # type: ignore[attr-defined]
        in_c = width
        for index, count in enumerate(layer_nums):
            out_c = width * (2**index) * expansion
            stride = 1 if index == 0 else 2
            blocks = [block(in_c, out_c, stride)]
            blocks += [block(out_c, out_c, 1) for _ in range(count - 1)]
            setattr(self, f"layer{index + 1}", nn.SequentialCell(blocks))
            in_c = out_c
        self.stages = len(layer_nums)
        self.pool = nn.GlobalAvgPool2d(keep_dims=True)
        self.flatten = nn.Flatten()
        self.end_point = nn.Dense(in_c, num_classes)

    def construct(self, x: Tensor) -> Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        if not self.small_input:
            x = self.maxpool(x)
        for index in range(self.stages):
            x = getattr(self, f"layer{index + 1}")(x)
        return self.end_point(self.flatten(self.pool(x)))


def resnet18(
    num_classes: int = 10, in_channels: int = 3, width: int = 64, small_input: bool = False
) -> ResNet:
    return ResNet(ResidualBlockBase, [2, 2, 2, 2], num_classes, in_channels, width, small_input)


def resnet34(
    num_classes: int = 10, in_channels: int = 3, width: int = 64, small_input: bool = False
) -> ResNet:
    return ResNet(ResidualBlockBase, [3, 4, 6, 3], num_classes, in_channels, width, small_input)


def resnet50(
    num_classes: int = 10, in_channels: int = 3, width: int = 64, small_input: bool = False
) -> ResNet:
    return ResNet(ResidualBlock, [3, 4, 6, 3], num_classes, in_channels, width, small_input)
