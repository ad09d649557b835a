"""Datasets: pipelines (map, shuffle, batch), loaders on synthetic files, vision transforms."""

from __future__ import annotations

import io

import numpy as np
import pytest

from train import DatasetError, set_seed
from train.dataset import (
    Cifar10Dataset,
    DigitsDataset,
    ImageFolderDataset,
    MnistDataset,
    NumpySlicesDataset,
    load_digits_arrays,
    vision,
)


def rows(dataset):
    return [tuple(np.asarray(v).tolist() for v in row) for row in dataset.create_tuple_iterator()]


def test_numpy_slices_batch_and_drop_remainder():
    ds = NumpySlicesDataset((np.arange(10), np.arange(10) * 2), ["x", "y"])
    assert ds.get_dataset_size() == 10 and ds.get_col_names() == ["x", "y"]
    batched = ds.batch(4)
    assert batched.get_dataset_size() == 3
    shapes = [row[0].shape for row in batched]
    assert shapes == [(4,), (4,), (2,)]
    assert ds.batch(4, drop_remainder=True).get_dataset_size() == 2
    assert len(list(ds.batch(4, drop_remainder=True))) == 2
    first = next(iter(ds.create_dict_iterator()))
    assert set(first) == {"x", "y"}


def test_map_applies_operations_in_order_to_named_columns():
    ds = NumpySlicesDataset({"x": np.arange(3), "y": np.arange(3)})
    mapped = ds.map([lambda v: v + 1, lambda v: v * 10], input_columns="y")
    assert rows(mapped) == [(0, 10), (1, 20), (2, 30)]
    with pytest.raises(DatasetError, match="unknown input_columns"):
        ds.map(lambda v: v, input_columns="z")


def test_seeded_shuffles_are_reproducible_and_change_per_epoch():
    def order(seed):
        ds = NumpySlicesDataset(np.arange(50), ["x"], shuffle=True, seed=seed).shuffle(8, seed=seed)
        return [rows(ds), rows(ds)]

    first, again = order(3), order(3)
    assert first == again
    assert first[0] != first[1]  # a new order each epoch
    assert sorted(first[0]) == [(i,) for i in range(50)]
    set_seed(5)
    a = rows(NumpySlicesDataset(np.arange(20), ["x"], shuffle=True))
    set_seed(5)
    assert rows(NumpySlicesDataset(np.arange(20), ["x"], shuffle=True)) == a


def test_take_and_errors():
    ds = NumpySlicesDataset(np.arange(10), ["x"])
    assert rows(ds.take(3)) == [(0,), (1,), (2,)]
    with pytest.raises(DatasetError, match="batch_size"):
        ds.batch(0)
    with pytest.raises(DatasetError, match="different lengths"):
        NumpySlicesDataset((np.arange(3), np.arange(4)))
    with pytest.raises(DatasetError, match="stacked"):
        ragged = np.empty(2, dtype=object)
        ragged[:] = [np.zeros(2), np.zeros(3)]
        list(NumpySlicesDataset(ragged, ["x"]).batch(2))


def test_digits_are_upsampled_to_32_and_split():
    pytest.importorskip("sklearn")
    images, labels = load_digits_arrays("train")
    test_images, _ = load_digits_arrays("test")
    assert images.shape[1:] == (1, 32, 32) and images.dtype == np.float32
    assert len(images) + len(test_images) == 1797 and labels.dtype == np.int32
    assert 0.0 <= images.min() and images.max() <= 1.0
    ds = DigitsDataset("test", image_size=20).batch(7)
    image, label = next(iter(ds))
    assert image.shape == (7, 1, 20, 20) and label.shape == (7,)
    assert np.all(image[:, :, :2] == 0)  # 8*2=16 -> two rows of padding on each side


def write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_idx_files(tmp_path):
    images = np.random.default_rng(0).integers(0, 255, (5, 28, 28))
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2, 3, 4, 5]))
    ds = MnistDataset(tmp_path, usage="test")
    image, label = next(iter(ds))
    assert image.shape == (28, 28, 1) and image.dtype == np.uint8 and label == 1
    np.testing.assert_array_equal(image[..., 0], images[0])
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\0\0\x08\x01\0\0\0\x09\x01")
    with pytest.raises(DatasetError, match="truncated"):
        MnistDataset(tmp_path, usage="test")
    with pytest.raises(DatasetError, match="cannot read"):
        MnistDataset(tmp_path, usage="train")


def test_cifar10_binary(tmp_path):
    rng = np.random.default_rng(0)
    records = np.concatenate(
        [np.array([[3], [7]], np.uint8), rng.integers(0, 255, (2, 3072), dtype=np.uint8)], 1
    )
    (tmp_path / "test_batch.bin").write_bytes(records.tobytes())
    image, label = next(iter(Cifar10Dataset(tmp_path, usage="test")))
    assert image.shape == (32, 32, 3) and label == 3
    np.testing.assert_array_equal(image[..., 0].ravel(), records[0, 1:1025])
    (tmp_path / "test_batch.bin").write_bytes(records.tobytes()[:-1])
    with pytest.raises(DatasetError, match="3073-byte"):
        Cifar10Dataset(tmp_path, usage="test")


def test_image_folder_with_and_without_decoding(tmp_path):
    image_module = pytest.importorskip("PIL.Image", reason="Decode needs Pillow")
    for name, color in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        (tmp_path / name).mkdir()
        buffer = io.BytesIO()
        image_module.new("RGB", (6, 4), color).save(buffer, format="PNG")
        (tmp_path / name / "a.png").write_bytes(buffer.getvalue())
    (tmp_path / "dog" / "notes.txt").write_text("ignored")
    raw = ImageFolderDataset(tmp_path)
    assert raw.get_dataset_size() == 2
    decoded = raw.map(vision.Decode(), input_columns="image")
    (cat, cat_label), (dog, dog_label) = list(decoded)
    assert cat.shape == (4, 6, 3) and (cat_label, dog_label) == (0, 1)
    assert cat[0, 0].tolist() == [255, 0, 0] and dog[0, 0].tolist() == [0, 0, 255]
    direct = ImageFolderDataset(tmp_path, decode=True)
    assert next(iter(direct))[0].shape == (4, 6, 3)
    with pytest.raises(DatasetError, match="not a readable image"):
        vision.Decode()(np.frombuffer(b"nope", np.uint8))


def test_image_folder_errors(tmp_path):
    with pytest.raises(DatasetError, match="not a folder"):
        ImageFolderDataset(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no images"):
        ImageFolderDataset(tmp_path)


def test_resize_crop_flip_normalize_hwc2chw():
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    assert vision.Resize((8, 12))(image).shape == (8, 12, 3)
    assert vision.Resize(2)(image).shape == (2, 3, 3)  # shorter side to 2
    flat = np.full((5, 5), 7.0, np.float32)
    np.testing.assert_allclose(vision.Resize((9, 3))(flat), 7.0)
    up = vision.resize_bilinear(np.array([[0.0, 10.0]]), 1, 4)
    np.testing.assert_allclose(up, [[0.0, 2.5, 7.5, 10.0]])
    assert vision.CenterCrop(2)(image).tolist() == image[1:3, 2:4].tolist()
    assert vision.CenterCrop(6)(image).shape == (6, 6, 3)
    crop = vision.RandomCrop(4, padding=1, seed=0)(image)
    assert crop.shape == (4, 4, 3)
    assert vision.RandomResizedCrop(5, seed=0)(image).shape == (5, 5, 3)
    assert np.array_equal(vision.RandomHorizontalFlip(prob=1.0)(image), image[:, ::-1])
    assert np.array_equal(vision.RandomHorizontalFlip(prob=0.0)(image), image)
    normalized = vision.Normalize([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])(image)
    np.testing.assert_allclose(normalized[0, 0], (image[0, 0] - [1, 2, 3]) / 2)
    assert vision.HWC2CHW()(image).shape == (3, 4, 6)
    assert vision.Rescale(1 / 255, 0)(image).max() <= 1.0
    assert vision.TypeCast(np.int32)(image).dtype == np.int32
    with pytest.raises(DatasetError, match="larger"):
        vision.RandomCrop(10)(image)
    with pytest.raises(DatasetError, match="non-zero"):
        vision.Normalize([0.0], [0.0])


def test_random_transforms_are_seeded():
    image = np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    set_seed(11)
    first = [vision.RandomResizedCrop(8)(image) for _ in range(3)]
    set_seed(11)
    second = [vision.RandomResizedCrop(8)(image) for _ in range(3)]
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
