"""Model definitions: LeNet-5 and ResNet-18/34/50 (MindSpore model-zoo parameter names)."""

from train.models.lenet import LeNet5
from train.models.resnet import ResidualBlock, ResidualBlockBase, ResNet, resnet18, resnet34, resnet50

__all__ = ["LeNet5", "ResNet", "ResidualBlock", "ResidualBlockBase", "resnet18", "resnet34", "resnet50"]
