"""Classic CNN families that neither transformers nor a CPU-only install of timm provides, written
after their papers at reduced depth and width: MobileNetV3, GhostNet, RepVGG, DenseNet, GoogLeNet
(Inception), ShuffleNetV2, SqueezeNet and ResNeXt.

torchvision and timm would give these directly, but torchvision's wheels on PyPI are CUDA builds
whose extension does not load beside torch's CPU build, and timm imports torchvision. The blocks
below keep each family's operators and graph shapes (grouped and depthwise convolutions, channel
shuffles, dense concatenations, squeeze-excitation with hard-sigmoid, parallel branches).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int, gate: type[nn.Module] = nn.Hardsigmoid):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.gate = gate()

    def forward(self, x):
        scale = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(F.relu(self.reduce(scale))))


class Classifier(nn.Module):
    def __init__(self, features: nn.Module, channels: int, classes: int = 100, hidden: int | None = None,
                 act: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.features = features
        head: list[nn.Module] = [nn.Flatten()]
        if hidden:
            head += [nn.Linear(channels, hidden), act()]
            channels = hidden
        head.append(nn.Linear(channels, classes))
        self.head = nn.Sequential(*head)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1))


# MobileNetV3 (Howard et al. 2019): inverted residuals, hard-swish, SE with hard-sigmoid.
class InvertedResidual(nn.Module):
    def __init__(self, cin, expanded, cout, kernel, stride, se: bool, act):
        super().__init__()
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=act))
        layers.append(conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if se:
            layers.append(SqueezeExcite(expanded, max(8, expanded // 4)))
        layers.append(conv_bn(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


def mobilenet_v3() -> nn.Module:
    hs, re = nn.Hardswish, nn.ReLU
    spec = [(16, 16, 16, 3, 2, True, re), (16, 72, 24, 3, 2, False, re), (24, 88, 24, 3, 1, False, re),
            (24, 96, 40, 5, 2, True, hs), (40, 240, 40, 5, 1, True, hs), (40, 120, 48, 5, 1, True, hs),
            (48, 288, 96, 5, 2, True, hs)]
    features = nn.Sequential(conv_bn(3, 16, 3, 2, act=hs), *(InvertedResidual(*row) for row in spec),
                             conv_bn(96, 576, 1, act=hs))
    return Classifier(features, 576, hidden=256, act=hs)


# GhostNet (Han et al. 2020): half the channels from cheap depthwise convolutions.
class Ghost(nn.Module):
    def __init__(self, cin, cout, relu=True):
        super().__init__()
        primary = cout // 2
        act = nn.ReLU if relu else None
        self.primary = conv_bn(cin, primary, 1, act=act)
        self.cheap = conv_bn(primary, cout - primary, 3, groups=primary, act=act)

    def forward(self, x):
        y = self.primary(x)
        return torch.cat([y, self.cheap(y)], dim=1)


class GhostBottleneck(nn.Module):
    def __init__(self, cin, hidden, cout, stride, se):
        super().__init__()
        layers: list[nn.Module] = [Ghost(cin, hidden)]
        if stride > 1:
            layers.append(conv_bn(hidden, hidden, 3, stride, groups=hidden, act=None))
        if se:
            layers.append(SqueezeExcite(hidden, hidden // 4, gate=nn.Sigmoid))
        layers.append(Ghost(hidden, cout, relu=False))
        self.block = nn.Sequential(*layers)
        self.shortcut = (nn.Identity() if stride == 1 and cin == cout else
                         nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None),
                                       conv_bn(cin, cout, 1, act=None)))

    def forward(self, x):
        return self.block(x) + self.shortcut(x)


def ghostnet() -> nn.Module:
    spec = [(16, 16, 16, 1, False), (16, 48, 24, 2, False), (24, 72, 24, 1, False), (24, 72, 40, 2, True),
            (40, 120, 40, 1, True), (40, 240, 80, 2, False), (80, 480, 112, 1, True)]
    features = nn.Sequential(conv_bn(3, 16, 3, 2), *(GhostBottleneck(*row) for row in spec), conv_bn(112, 480, 1))
    return Classifier(features, 480, hidden=320)


# RepVGG (Ding et al. 2021), in its training form: 3x3, 1x1 and identity branches, each with BN.
class RepVGGBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.dense = conv_bn(cin, cout, 3, stride, act=None)
        self.one = conv_bn(cin, cout, 1, stride, act=None)
        self.identity = nn.BatchNorm2d(cout) if cin == cout and stride == 1 else None

    def forward(self, x):
        y = self.dense(x) + self.one(x)
        if self.identity is not None:
            y = y + self.identity(x)
        return F.relu(y)


def repvgg() -> nn.Module:
    widths = [(3, 32, 2), (32, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1),
              (128, 256, 2)]
    return Classifier(nn.Sequential(*(RepVGGBlock(*row) for row in widths)), 256)


# DenseNet (Huang et al. 2017): BN-ReLU-Conv layers whose outputs are concatenated.
class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                  nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                  nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], dim=1)


def densenet(growth: int = 16, blocks=(3, 3, 3)) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                               nn.MaxPool2d(3, 2, 1)]
    channels = 32
    for index, count in enumerate(blocks):
        for _ in range(count):
            layers.append(DenseLayer(channels, growth))
            channels += growth
        if index < len(blocks) - 1:
            layers += [nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, channels // 2, 1, bias=False),
                       nn.AvgPool2d(2)]
            channels //= 2
    layers += [nn.BatchNorm2d(channels), nn.ReLU()]
    return Classifier(nn.Sequential(*layers), channels)


# GoogLeNet (Szegedy et al. 2015): four parallel branches, concatenated.
class InceptionBlock(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, pool):
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1)
        self.b3 = nn.Sequential(conv_bn(cin, c3r, 1), conv_bn(c3r, c3, 3))
        self.b5 = nn.Sequential(conv_bn(cin, c5r, 1), conv_bn(c5r, c5, 3), conv_bn(c5, c5, 3))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pool, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


def googlenet() -> nn.Module:
    features = nn.Sequential(
        conv_bn(3, 32, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), conv_bn(32, 64, 1), conv_bn(64, 96, 3),
        nn.MaxPool2d(3, 2, ceil_mode=True), InceptionBlock(96, 32, 48, 64, 8, 16, 16),
        InceptionBlock(128, 64, 64, 96, 16, 48, 32), nn.MaxPool2d(3, 2, ceil_mode=True),
        InceptionBlock(240, 96, 48, 104, 8, 24, 32))
    return Classifier(features, 256)


# ShuffleNetV2 (Ma et al. 2018): channel split, branch, concatenate, channel shuffle.
def channel_shuffle(x, groups: int = 2):
    batch, channels, height, width = x.shape
    x = x.view(batch, groups, channels // groups, height, width).transpose(1, 2)
    return x.reshape(batch, channels, height, width)


class ShuffleBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        branch_in = cin if stride > 1 else half
        self.branch = nn.Sequential(conv_bn(branch_in, half, 1), conv_bn(half, half, 3, stride, groups=half, act=None),
                                    conv_bn(half, half, 1))
        self.shortcut = (nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, half, 1))
                         if stride > 1 else None)

    def forward(self, x):
        if self.stride == 1:
            left, right = x.chunk(2, dim=1)
            out = torch.cat([left, self.branch(right)], 1)
        else:
            out = torch.cat([self.shortcut(x), self.branch(x)], 1)
        return channel_shuffle(out)


def shufflenet_v2() -> nn.Module:
    layers: list[nn.Module] = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    channels = 24
    for width, repeats in ((48, 2), (96, 3), (192, 2)):
        layers.append(ShuffleBlock(channels, width, 2))
        layers += [ShuffleBlock(width, width, 1) for _ in range(repeats - 1)]
        channels = width
    layers.append(conv_bn(channels, 512, 1))
    return Classifier(nn.Sequential(*layers), 512)


# SqueezeNet 1.1 (Iandola et al. 2016): fire modules, a convolutional classifier, no BatchNorm.
class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.left = nn.Conv2d(squeeze, expand, 1)
        self.right = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.left(x)), F.relu(self.right(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes: int = 100):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(64, 16, 64),
            Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(128, 32, 128), Fire(256, 32, 128),
            nn.MaxPool2d(3, 2, ceil_mode=True), Fire(256, 48, 192))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(384, classes, 1), nn.ReLU(),
                                        nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x):
        return self.classifier(self.features(x))


# ResNeXt (Xie et al. 2017): bottlenecks with a 32-group 3x3 convolution.
class ResNeXtBlock(nn.Module):
    def __init__(self, cin, width, cout, stride, groups=32):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride, groups=groups),
                                  conv_bn(width, cout, 1, act=None))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else conv_bn(cin, cout, 1, stride, act=None)

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


def resnext() -> nn.Module:
    layers: list[nn.Module] = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    channels = 64
    for width, cout, stride in ((128, 256, 1), (256, 512, 2), (512, 1024, 2)):
        layers.append(ResNeXtBlock(channels, width, cout, stride))
        channels = cout
    return Classifier(nn.Sequential(*layers), channels)


NETWORKS = {
    "mobilenet_v3": mobilenet_v3,
    "ghostnet": ghostnet,
    "repvgg": repvgg,
    "densenet": densenet,
    "googlenet": googlenet,
    "shufflenet_v2": shufflenet_v2,
    "squeezenet": SqueezeNet,
    "resnext": resnext,
}
