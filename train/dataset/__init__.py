"""``train.dataset``: pipelines (``map``, ``shuffle``, ``batch``), loaders and ``vision`` transforms."""

from train.dataset import vision
from train.dataset.loaders import (
    Cifar10Dataset,
    DigitsDataset,
    ImageFolderDataset,
    MnistDataset,
    load_digits_arrays,
    read_idx,
)
from train.dataset.pipeline import Dataset, NumpySlicesDataset

__all__ = [
    "Cifar10Dataset",
    "Dataset",
    "DigitsDataset",
    "ImageFolderDataset",
    "MnistDataset",
    "NumpySlicesDataset",
    "load_digits_arrays",
    "read_idx",
    "vision",
]
