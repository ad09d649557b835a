"""``train.nn``: Cells, layers, losses, optimizers and learning-rate schedules (``mindspore.nn``)."""

from train.nn.cell import Cell, SequentialCell
from train.nn.layers import GELU, Conv2d, Dense, Dropout, Flatten, ReLU, ReLU6, Sigmoid, Tanh, get_activation
from train.nn.learning_rate import (
    CosineDecayLR,
    LearningRateSchedule,
    StepDecayLR,
    WarmUpLR,
    cosine_decay_lr,
    piecewise_constant_lr,
    step_lr,
    warmup_lr,
)
from train.nn.loss import L1Loss, LossBase, MSELoss, SoftmaxCrossEntropyWithLogits, WithLossCell
from train.nn.normalization import BatchNorm1d, BatchNorm2d
from train.nn.optim import SGD, Adam, AdamW, Momentum, Optimizer, OptimizerError
from train.nn.pooling import AvgPool2d, GlobalAvgPool2d, MaxPool2d

__all__ = [
    "GELU",
    "SGD",
    "Adam",
    "AdamW",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Cell",
    "Conv2d",
    "CosineDecayLR",
    "Dense",
    "Dropout",
    "Flatten",
    "GlobalAvgPool2d",
    "L1Loss",
    "LearningRateSchedule",
    "LossBase",
    "MSELoss",
    "MaxPool2d",
    "Momentum",
    "Optimizer",
    "OptimizerError",
    "ReLU",
    "ReLU6",
    "SequentialCell",
    "Sigmoid",
    "SoftmaxCrossEntropyWithLogits",
    "StepDecayLR",
    "Tanh",
    "WarmUpLR",
    "WithLossCell",
    "cosine_decay_lr",
    "get_activation",
    "piecewise_constant_lr",
    "step_lr",
    "warmup_lr",
]
