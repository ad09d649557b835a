"""Built-in datasets: scikit-learn digits, MNIST idx files, CIFAR-10 binaries, ImageFolder.

Image rows are HWC ``uint8`` as ``mindspore.dataset`` yields them (digits: CHW float32, ready
for LeNet); labels are ``int32``. Files are read from a local path, never downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from train.dataset.pipeline import NumpySlicesDataset
from train.errors import DatasetError, MissingDependencyError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def _split(count: int, usage: str, test_fraction: float, seed: int) -> np.ndarray:
    order = np.random.default_rng(seed).permutation(count)
    cut = round(count * (1.0 - test_fraction))
    if usage == "train":
        return np.sort(order[:cut])
    if usage == "test":
        return np.sort(order[cut:])
    if usage == "all":
        return np.arange(count)
    raise DatasetError(f"usage must be 'train', 'test' or 'all', got {usage!r}")


def load_digits_arrays(
    usage: str = "train", image_size: int = 32, test_fraction: float = 0.2, split_seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits as ``(N, 1, image_size, image_size)`` float32 in [0, 1] + int32 labels.

    Each 8x8 image is upsampled by pixel repetition to the largest multiple of 8 that fits and
    centred with zero padding (32 -> exactly 4x). The train/test split is a seeded permutation.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise MissingDependencyError(
            "the digits dataset needs scikit-learn: pip install scikit-learn"
        ) from err
    if image_size < 8:
        raise DatasetError(f"image_size must be >= 8, got {image_size}")
    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)
    labels = bunch.target.astype(np.int32)
    pick = _split(len(labels), usage, test_fraction, split_seed)
    images, labels = images[pick], labels[pick]
    factor = image_size // 8
    images = images.repeat(factor, axis=1).repeat(factor, axis=2)
    before = (image_size - 8 * factor) // 2
    after = image_size - 8 * factor - before
    images = np.pad(images, ((0, 0), (before, after), (before, after)))
    return images[:, None], labels


def DigitsDataset(
    usage: str = "train",
    image_size: int = 32,
    shuffle: bool = False,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    seed: int | None = None,
) -> NumpySlicesDataset:
    """Columns ``image`` (1, S, S) float32 and ``label`` int32; see :func:`load_digits_arrays`."""
    images, labels = load_digits_arrays(usage, image_size, test_fraction, split_seed)
    return NumpySlicesDataset((images, labels), ["image", "label"], shuffle=shuffle, seed=seed)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise DatasetError(f"cannot read {path}: {err.strerror}; check dataset_dir") from err


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """An IDX file (MNIST): magic ``0x0000 <dtype> <ndim>``, big-endian dims, then the data."""
    data = _read(Path(path))
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DatasetError(f"{path}: not an unsigned-byte IDX file (bad magic {data[:4].hex()})")
    ndim = data[3]
    header = 4 + 4 * ndim
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if len(data) != header + int(np.prod(dims)):
        raise DatasetError(
            f"{path}: dims {dims} need {int(np.prod(dims))} bytes after the header, file has "
            f"{len(data) - header}; the file is truncated or damaged"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def MnistDataset(
    dataset_dir: str | os.PathLike, usage: str = "train", shuffle: bool = False, seed: int | None = None
) -> NumpySlicesDataset:
    """MNIST from ``dataset_dir`` (``train-images-idx3-ubyte`` ... ``t10k-labels-idx1-ubyte``):
    columns ``image`` (28, 28, 1) uint8 and ``label`` int32."""
    root = Path(dataset_dir)
    parts = {"train": ["train"], "test": ["t10k"], "all": ["train", "t10k"]}
    if usage not in parts:
        raise DatasetError(f"MnistDataset: usage must be 'train', 'test' or 'all', got {usage!r}")
    images, labels = [], []
    for stem in parts[usage]:
        image_file = root / f"{stem}-images-idx3-ubyte"
        label_file = root / f"{stem}-labels-idx1-ubyte"
        images.append(read_idx(image_file)[..., None])
        labels.append(read_idx(label_file).astype(np.int32))
        if len(images[-1]) != len(labels[-1]):
            raise DatasetError(
                f"{image_file} has {len(images[-1])} images but {label_file} {len(labels[-1])} labels"
            )
    return NumpySlicesDataset(
        (np.concatenate(images), np.concatenate(labels)), ["image", "label"], shuffle=shuffle, seed=seed
    )


def Cifar10Dataset(
    dataset_dir: str | os.PathLike, usage: str = "train", shuffle: bool = False, seed: int | None = None
) -> NumpySlicesDataset:
    """CIFAR-10 binary version (``data_batch_1.bin`` ... ``test_batch.bin``; each record is one
    label byte and 3072 CHW bytes): columns ``image`` (32, 32, 3) uint8 and ``label`` int32."""
    root = Path(dataset_dir)
    names = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
    names["all"] = names["train"] + names["test"]
    if usage not in names:
        raise DatasetError(f"Cifar10Dataset: usage must be 'train', 'test' or 'all', got {usage!r}")
    files = [root / n for n in names[usage] if (root / n).exists()]
    if not files:
        raise DatasetError(f"Cifar10Dataset: no {names[usage][0]} (binary version) in {root}")
    records = []
    for path in files:
        data = np.frombuffer(_read(path), dtype=np.uint8)
        if data.size % 3073:
            raise DatasetError(f"{path}: {data.size} bytes is not a whole number of 3073-byte records")
        records.append(data.reshape(-1, 3073))
    table = np.concatenate(records)
    images = table[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return NumpySlicesDataset(
        (np.ascontiguousarray(images), table[:, 0].astype(np.int32)),
        ["image", "label"],
        shuffle=shuffle,
        seed=seed,
    )


def ImageFolderDataset(
    dataset_dir: str | os.PathLike,
    decode: bool = False,
    shuffle: bool = False,
    class_indexing: dict[str, int] | None = None,
    extensions: tuple[str, ...] = IMAGE_EXTENSIONS,
    seed: int | None = None,
) -> NumpySlicesDataset:
    """``dataset_dir/<class name>/<image file>``: columns ``image`` (encoded bytes as uint8, or
    decoded HWC with ``decode=True``, which needs Pillow) and ``label`` (sorted class order)."""
    root = Path(dataset_dir)
    if not root.is_dir():
        raise DatasetError(f"ImageFolderDataset: {root} is not a folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    indexing = class_indexing or {name: i for i, name in enumerate(classes)}
    files, labels = [], []
    for name in classes:
        if name not in indexing:
            continue
        for path in sorted((root / name).iterdir()):
            if path.suffix.lower() in extensions:
                files.append(path)
                labels.append(indexing[name])
    if not files:
        raise DatasetError(
            f"ImageFolderDataset: no images with extensions {extensions} under {root}/<class>/"
        )
    if decode:
        from train.dataset.vision import Decode

        decoder = Decode()
        images = np.empty(len(files), dtype=object)
        images[:] = [decoder(np.frombuffer(_read(p), dtype=np.uint8)) for p in files]
    else:
        images = np.empty(len(files), dtype=object)
        images[:] = [np.frombuffer(_read(p), dtype=np.uint8) for p in files]
    return NumpySlicesDataset(
        (images, np.asarray(labels, dtype=np.int32)), ["image", "label"], shuffle=shuffle, seed=seed
    )
