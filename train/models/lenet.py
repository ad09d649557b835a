"""LeNet-5 as in MindSpore's model zoo (``models/official/cv/lenet/src/lenet.py``).

conv1 (5x5, valid) -> relu -> max_pool 2x2 -> conv2 (5x5, valid) -> relu -> max_pool 2x2 ->
flatten -> fc1 (400->120) -> relu -> fc2 (120->84) -> relu -> fc3 (84->num_class), on 32x32 input.
"""

from __future__ import annotations

from train import nn
from train.tensor import Tensor


class LeNet5(nn.Cell):
    def __init__(self, num_class: int = 10, num_channel: int = 1, include_top: bool = True) -> None:
        super().__init__()
        self.include_top = include_top
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        if include_top:
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(16 * 5 * 5, 120)
            self.fc2 = nn.Dense(120, 84)
            self.fc3 = nn.Dense(84, num_class)

    def construct(self, x: Tensor) -> Tensor:
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        if not self.include_top:
            return x
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)
