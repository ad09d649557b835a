"""Optional pre- and post-processing around a model.

Pre-processing (config ``"preprocessing": "image"``) lets clients send encoded PNG/JPEG bytes:
each image is decoded with Pillow, resized, center-cropped, scaled, normalized and laid out as the
model wants, following the ``preprocessing`` JSON spec in the model's metadata::

    {"resize": 256,             # shorter side to 256 (or [height, width] exactly)
     "crop": 224,               # center crop (or [height, width]); alias "center_crop"
     "scale": 0.00392156862745098,   # pixel multiplier before mean/std (default 1/255)
     "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
     "layout": "NCHW",          # or "NHWC"
     "color": "RGB",            # or "BGR" or "L" (grayscale)
     "input": "data"}           # the model input that gets the images (default: the only 4-D one)

Missing sizes come from the model input's static height and width.

Post-processing is Triton's ``classification`` parameter on a requested output: the top-k
classes as BYTES strings ``"score:index:label"`` (``label`` from the ``labels`` metadata, a JSON
list; omitted when the model has none).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, InvalidRequestError

MAX_IMAGE_PIXELS = 40_000_000  # a decoded image beyond this is refused (decompression bombs)


@dataclass(frozen=True)
class ImagePreprocessing:
    input_name: str
    resize: tuple[int, int] | int | None
    crop: tuple[int, int] | None
    scale: float
    mean: np.ndarray
    std: np.ndarray
    layout: str
    color: str
    dtype: np.dtype

    @classmethod
    def from_model(cls, metadata: dict[str, str], inputs: list) -> ImagePreprocessing:
        """Build from the model's metadata and input specs (lite.TensorSpec-like objects)."""
        try:
            spec = json.loads(metadata.get("preprocessing", "{}"))
        except json.JSONDecodeError as err:
            raise ConfigError(f"model metadata 'preprocessing' is not JSON: {err}") from err
        if not isinstance(spec, dict):
            raise ConfigError("model metadata 'preprocessing' must be a JSON object")
        target = _image_input(spec.get("input"), inputs)
        layout = spec.get("layout", "NCHW")
        color = spec.get("color", "RGB")
        if layout not in ("NCHW", "NHWC") or color not in ("RGB", "BGR", "L"):
            raise ConfigError(f"preprocessing layout {layout!r} / color {color!r} not supported")
        crop = _size(spec.get("crop", spec.get("center_crop")), "crop")
        if crop is None:
            crop = _static_hw(target.shape, layout)
        resize = spec.get("resize")
        resize = _size(resize, "resize") if isinstance(resize, list) else resize
        if resize is not None and not isinstance(resize, (int, tuple)):
            raise ConfigError(f"preprocessing resize {resize!r}: expected an integer or [height, width]")
        channels = 1 if color == "L" else 3
        mean = np.asarray(spec.get("mean", [0.0] * channels), dtype=np.float32)
        std = np.asarray(spec.get("std", [1.0] * channels), dtype=np.float32)
        if mean.shape != (channels,) or std.shape != (channels,) or np.any(std == 0):
            raise ConfigError(f"preprocessing mean/std need {channels} values each (std non-zero)")
        return cls(
            input_name=target.name,
            resize=resize,
            crop=crop,
            scale=float(spec.get("scale", 1.0 / 255.0)),
            mean=mean,
            std=std,
            layout=layout,
            color=color,
            dtype=np.dtype(target.dtype),
        )

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Encoded images (object array of bytes, one per batch item) -> the model's input."""
        planes = [self._one(item, index) for index, item in enumerate(images.reshape(-1))]
        batch = np.stack(planes)
        return batch.astype(self.dtype, copy=False)

    def _one(self, data: object, index: int) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError  # the serve extra

        if not isinstance(data, (bytes, bytearray)):
            raise InvalidRequestError(f"image {index}: expected encoded image bytes")
        try:
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InvalidRequestError(
                    f"image {index}: {width}x{height} exceeds the {MAX_IMAGE_PIXELS} pixel limit"
                )
            image = image.convert("L" if self.color == "L" else "RGB")
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
            if isinstance(err, InvalidRequestError):
                raise
            raise InvalidRequestError(f"image {index}: not a decodable PNG/JPEG image ({err})") from err
        image = self._resize(image)
        image = self._center_crop(image)
        pixels = np.asarray(image, dtype=np.float32)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if self.color == "BGR":
            pixels = pixels[:, :, ::-1]
        pixels = (pixels * self.scale - self.mean) / self.std
        return np.ascontiguousarray(pixels.transpose(2, 0, 1) if self.layout == "NCHW" else pixels)

    def _resize(self, image):
        from PIL import Image

        if self.resize is None:
            return image
        if isinstance(self.resize, tuple):
            height, width = self.resize
        else:
            ratio = self.resize / min(image.size)
            width, height = max(1, round(image.width * ratio)), max(1, round(image.height * ratio))
        return image.resize((width, height), Image.BILINEAR)

    def _center_crop(self, image):
        from PIL import Image

        height, width = self.crop
        if image.width < width or image.height < height:
            image = image.resize((max(width, image.width), max(height, image.height)), Image.BILINEAR)
        left = (image.width - width) // 2
        top = (image.height - height) // 2
        return image.crop((left, top, left + width, top + height))


def _image_input(name: str | None, inputs: list):
    if name is not None:
        for spec in inputs:
            if spec.name == name:
                return spec
        raise ConfigError(f"preprocessing input {name!r} is not an input of the model")
    four_d = [spec for spec in inputs if len(spec.shape) == 4]
    if len(four_d) != 1 or len(inputs) != 1:
        raise ConfigError("image preprocessing needs a model with one 4-D input, or 'input' in the spec")
    return four_d[0]


def _size(value: object, what: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and value > 0:
        return (value, value)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return (value[0], value[1])
    raise ConfigError(f"preprocessing {what} {value!r}: expected a positive integer or [height, width]")


def _static_hw(shape: tuple, layout: str) -> tuple[int, int]:
    height, width = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if not isinstance(height, int) or not isinstance(width, int):
        raise ConfigError("preprocessing needs 'crop' when the model's image size is not static")
    return (height, width)


def labels_of(metadata: dict[str, str]) -> list[str]:
    """The class labels stored in the model's metadata (a JSON list), or none."""
    raw = metadata.get("labels")
    if not raw:
        return []
    try:
        labels = json.loads(raw)
    except json.JSONDecodeError:
        return [line for line in raw.splitlines() if line]
    return [str(label) for label in labels] if isinstance(labels, list) else []


def classify(scores: np.ndarray, k: int, labels: list[str], batched: bool) -> np.ndarray:
    """Top-k "score:index[:label]" strings per batch item (or over the whole tensor)."""
    if scores.dtype.kind not in ("f", "i", "u", "b"):
        raise InvalidRequestError(f"classification needs a numeric output, got {scores.dtype}")
    rows = scores.reshape(scores.shape[0], -1) if batched and scores.ndim > 0 else scores.reshape(1, -1)
    k = min(k, rows.shape[1])
    result = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        top = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(top):
            text = f"{float(row[index]):f}:{int(index)}"
            if index < len(labels):
                text += f":{labels[index]}"
            result[r, c] = text.encode()
    return result if batched else result.reshape(k)
