"""Shared fixtures: networks trained on scikit-learn digits with the train core, exported to ONNX.

Training is short (a few seconds each) and happens once per test session.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the digits dataset comes from scikit-learn")

from train import Model, Tensor, export, nn, num_threads, set_seed
from train.dataset import DigitsDataset
from train.dataset.loaders import load_digits_arrays
from train.models import LeNet5, ResidualBlockBase, ResNet


def _train(net, image_size: int, epochs: int, max_lr: float) -> None:
    data = DigitsDataset("train", image_size=image_size, shuffle=True, seed=0).batch(32)
    schedule = nn.CosineDecayLR(0.0, max_lr, data.get_dataset_size() * epochs)
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=schedule, momentum=0.9, weight_decay=1e-4)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
    model.train(epochs, data, progress_bar=False)


@pytest.fixture(scope="session")
def digits32():
    return load_digits_arrays("train", 32), load_digits_arrays("test", 32)


@pytest.fixture(scope="session")
def digits16():
    return load_digits_arrays("train", 16), load_digits_arrays("test", 16)


@pytest.fixture(scope="session")
def lenet_onnx(tmp_path_factory) -> str:
    """LeNet-5 (61.7 k parameters) trained 4 epochs on 32x32 digits (~98.6% test accuracy)."""
    with num_threads(1):
        set_seed(2)
        net = LeNet5()
        _train(net, 32, epochs=4, max_lr=0.05)
        path = export(net, Tensor(np.zeros((1, 1, 32, 32), np.float32)),
                      file_name=tmp_path_factory.mktemp("lenet") / "lenet", file_format="ONNX")
    return str(path)


@pytest.fixture(scope="session")
def resnet_onnx(tmp_path_factory) -> str:
    """A ResNet ([1, 1, 1] basic blocks, width 16, BatchNorm) trained 3 epochs on 16x16 digits."""
    with num_threads(1):
        set_seed(2)
        net = ResNet(ResidualBlockBase, [1, 1, 1], num_classes=10, in_channels=1, width=16, small_input=True)
        _train(net, 16, epochs=3, max_lr=0.1)
        path = export(net, Tensor(np.zeros((1, 1, 16, 16), np.float32)),
                      file_name=tmp_path_factory.mktemp("resnet") / "resnet", file_format="ONNX")
    return str(path)


def accuracy(path: str, images: np.ndarray, labels: np.ndarray, device: str = "cpu") -> float:
    import lite

    model = lite.Model.load(path, device=device)
    return float(np.mean(model(images).argmax(axis=1) == labels))
