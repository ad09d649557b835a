"""Image transforms on numpy arrays (``mindspore.dataset.vision``).

Images are HWC (or HW) ``uint8`` or float arrays until ``HWC2CHW``. Random transforms draw
from their own seeded generator (``train.set_seed`` before building them, or ``seed=``).
Only ``Decode`` needs Pillow; resizing is bilinear (half-pixel centres) in numpy.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np

from train.errors import DatasetError, MissingDependencyError
from train.random import generator


def _size(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    return int(size[0]), int(size[1])


class Decode:
    """Encoded image bytes (JPEG, PNG, ...) -> HWC uint8 RGB. Needs Pillow."""

    def __call__(self, data: np.ndarray) -> np.ndarray:
        try:
            from PIL import Image
        except ImportError as err:
            raise MissingDependencyError("Decode needs Pillow: pip install pillow") from err
        try:
            with Image.open(io.BytesIO(np.asarray(data, dtype=np.uint8).tobytes())) as image:
                return np.asarray(image.convert("RGB"))
        except OSError as err:
            raise DatasetError(f"Decode: not a readable image ({err})") from err


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of HW or HWC with half-pixel centres (OpenCV's INTER_LINEAR convention)."""
    source = image.astype(np.float32)
    in_h, in_w = image.shape[:2]

    def axis(out: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        position = np.clip((np.arange(out) + 0.5) * (size / out) - 0.5, 0, size - 1)
        low = np.floor(position).astype(np.int64)
        high = np.minimum(low + 1, size - 1)
        return low, high, (position - low).astype(np.float32)

    top, bottom, wy = axis(height, in_h)
    left, right, wx = axis(width, in_w)
    shape_y = (-1, 1) + (1,) * (image.ndim - 2)
    shape_x = (1, -1) + (1,) * (image.ndim - 2)
    rows = source[top] * (1 - wy.reshape(shape_y)) + source[bottom] * wy.reshape(shape_y)
    out = rows[:, left] * (1 - wx.reshape(shape_x)) + rows[:, right] * wx.reshape(shape_x)
    if image.dtype == np.uint8:
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return out.astype(image.dtype)


class Resize:
    """Resize to ``size`` (h, w); an int resizes the shorter side to it, keeping the aspect ratio."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size

    def __call__(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        if isinstance(self.size, int):
            if h <= w:
                return resize_bilinear(image, self.size, max(1, round(w * self.size / h)))
            return resize_bilinear(image, max(1, round(h * self.size / w)), self.size)
        return resize_bilinear(image, *_size(self.size))


def _crop(image: np.ndarray, top: int, left: int, height: int, width: int) -> np.ndarray:
    return image[top : top + height, left : left + width]


class CenterCrop:
    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _size(size)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        ch, cw = self.size
        if ch > h or cw > w:  # MindSpore pads a too-small image before cropping
            image = _pad(image, max(0, (ch - h + 1) // 2), max(0, (cw - w + 1) // 2))
            h, w = image.shape[:2]
        return _crop(image, (h - ch) // 2, (w - cw) // 2, ch, cw)


def _pad(image: np.ndarray, pad_h: int, pad_w: int) -> np.ndarray:
    widths = ((pad_h, pad_h), (pad_w, pad_w)) + ((0, 0),) * (image.ndim - 2)
    return np.pad(image, widths)


class RandomCrop:
    """Crop ``size`` at a random place, after zero-padding by ``padding`` on each side."""

    def __init__(self, size: int | Sequence[int], padding: int = 0, seed: int | None = None) -> None:
        self.size = _size(size)
        self.padding = padding
        self.rng = generator(seed)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        if self.padding:
            image = _pad(image, self.padding, self.padding)
        h, w = image.shape[:2]
        ch, cw = self.size
        if ch > h or cw > w:
            raise DatasetError(
                f"RandomCrop: crop {self.size} is larger than the image {image.shape[:2]}; add padding"
            )
        top = int(self.rng.integers(h - ch + 1))
        left = int(self.rng.integers(w - cw + 1))
        return _crop(image, top, left, ch, cw)


class RandomResizedCrop:
    """Crop a random area fraction in ``scale`` with aspect ratio in ``ratio``, resized to ``size``
    (10 attempts, then a centre crop, as MindSpore and torchvision do)."""

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        seed: int | None = None,
    ) -> None:
        self.size = _size(size)
        self.scale, self.ratio = scale, ratio
        self.rng = generator(seed)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        area = h * w
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * self.rng.uniform(*self.scale)
            aspect = math.exp(self.rng.uniform(*log_ratio))
            cw = round(math.sqrt(target * aspect))
            ch = round(math.sqrt(target / aspect))
            if 0 < cw <= w and 0 < ch <= h:
                top = int(self.rng.integers(h - ch + 1))
                left = int(self.rng.integers(w - cw + 1))
                return resize_bilinear(_crop(image, top, left, ch, cw), *self.size)
        side = min(h, w)
        return resize_bilinear(_crop(image, (h - side) // 2, (w - side) // 2, side, side), *self.size)


class RandomHorizontalFlip:
    def __init__(self, prob: float = 0.5, seed: int | None = None) -> None:
        self.prob = prob
        self.rng = generator(seed)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return image[:, ::-1].copy() if self.rng.random() < self.prob else image


class Rescale:
    """``image * rescale + shift`` as float32 (``Rescale(1/255, 0)`` maps uint8 to [0, 1])."""

    def __init__(self, rescale: float, shift: float) -> None:
        self.rescale, self.shift = rescale, shift

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return (image.astype(np.float32) * self.rescale + self.shift).astype(np.float32)


class Normalize:
    """``(image - mean) / std`` per channel of an HWC image (values on the image's own scale)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        if np.any(self.std == 0):
            raise DatasetError(f"Normalize: std must be non-zero, got {list(std)}")

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return ((image.astype(np.float32) - self.mean) / self.std).astype(np.float32)


class HWC2CHW:
    def __call__(self, image: np.ndarray) -> np.ndarray:
        if image.ndim == 2:
            return image[None]
        if image.ndim != 3:
            raise DatasetError(f"HWC2CHW: expected an HWC image, got shape {image.shape}")
        return np.ascontiguousarray(image.transpose(2, 0, 1))


class TypeCast:
    """Cast a column to ``data_type`` (``dataset.transforms.TypeCast``)."""

    def __init__(self, data_type: np.dtype | type | str) -> None:
        self.data_type = np.dtype(data_type)

    def __call__(self, value: np.ndarray) -> np.ndarray:
        return np.asarray(value).astype(self.data_type)
