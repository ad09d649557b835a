"""Image preprocessing stored with a model: the ``preprocessing`` metadata spec.

One spec, written by the converter (``lite convert --calib images/ --preprocess spec.json``, so
calibration sees images exactly as requests will) and read by the server (clients may send
encoded PNG/JPEG bytes)::

    {"resize": 256,             # shorter side to 256 (or [height, width] exactly)
     "crop": 224,               # center crop (or [height, width]); alias "center_crop"
     "scale": 0.00392156862745098,   # pixel multiplier before mean/std (default 1/255)
     "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
     "layout": "NCHW",          # or "NHWC"
     "color": "RGB",            # or "BGR" or "L" (grayscale); default from the input's channels
     "input": "data"}           # the model input that gets the images (default: the only 4-D one)

Missing sizes come from the model input's static height and width. Decoding needs Pillow,
imported only when an image is decoded.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lite.errors import PreprocessingError

METADATA_KEY = "preprocessing"
KEYS = ("resize", "crop", "center_crop", "scale", "mean", "std", "layout", "color", "input")
# A decoded image beyond this is refused, from the size in its header before any pixel is decoded
# (decompression bombs: a few KB of PNG can declare a 50,000 x 50,000 image). 40 Mpx covers camera
# photos; Pillow's own limit is about twice as large.
MAX_IMAGE_PIXELS = 40_000_000
# What encoded bytes (a request to the server) may be: the two formats the spec promises. Pillow
# opens dozens of formats; each is a decoder an untrusted request could reach, and some cost far
# more CPU per byte than PNG or JPEG. Files on disk (calibration sets) may be any format Pillow reads.
ENCODED_FORMATS = ("PNG", "JPEG")


def read_spec(spec: str | os.PathLike | dict[str, Any] | None) -> dict[str, Any]:
    """A spec given as a dict, JSON text or a JSON file path; unknown keys are an error."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        raw = dict(spec)
    else:
        text = str(spec)
        if not text.lstrip().startswith("{"):
            try:
                text = Path(text).read_text()
            except OSError as err:
                raise PreprocessingError(f"preprocessing spec {spec}: cannot read it ({err.strerror})") from err
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise PreprocessingError(f"preprocessing spec is not valid JSON: {err}") from err
    if not isinstance(raw, dict):
        raise PreprocessingError("the preprocessing spec must be a JSON object")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise PreprocessingError(f"preprocessing spec: unknown key(s) {unknown}; known keys: {', '.join(KEYS)}")
    return raw


@dataclass(frozen=True)
class ImagePreprocessing:
    """A checked spec bound to one model input (anything with ``name``, ``dtype``, ``shape``)."""

    input_name: str
    resize: int | tuple[int, int] | None
    crop: tuple[int, int]
    scale: float
    mean: np.ndarray
    std: np.ndarray
    layout: str
    color: str
    dtype: np.dtype
    raw: dict[str, Any]

    @classmethod
    def from_metadata(cls, metadata: dict[str, str], inputs: list) -> ImagePreprocessing:
        return cls.from_spec(read_spec(metadata.get(METADATA_KEY, "{}")), inputs)

    @classmethod
    def from_spec(cls, raw: dict[str, Any], inputs: list) -> ImagePreprocessing:
        target = _image_input(raw.get("input"), inputs)
        layout = raw.get("layout", "NCHW")
        if layout not in ("NCHW", "NHWC"):
            raise PreprocessingError(f"preprocessing layout {layout!r}: expected NCHW or NHWC")
        shape = target.shape
        channels = shape[1] if layout == "NCHW" else shape[3]
        color = raw.get("color", "L" if channels == 1 else "RGB")
        if color not in ("RGB", "BGR", "L"):
            raise PreprocessingError(f"preprocessing color {color!r}: expected RGB, BGR or L")
        crop = _size(raw.get("crop", raw.get("center_crop")), "crop") or _static_size(shape, layout)
        resize = raw.get("resize")
        if isinstance(resize, list):
            resize = _size(resize, "resize")
        elif resize is not None and not (isinstance(resize, int) and resize > 0):
            raise PreprocessingError(f"preprocessing resize {resize!r}: expected a positive integer or [height, width]")
        planes = 1 if color == "L" else 3
        mean = np.asarray(raw.get("mean", [0.0] * planes), dtype=np.float32)
        std = np.asarray(raw.get("std", [1.0] * planes), dtype=np.float32)
        if mean.shape != (planes,) or std.shape != (planes,) or np.any(std == 0):
            raise PreprocessingError(f"preprocessing mean/std need {planes} values each (std non-zero) for color {color}")
        dtype = np.dtype(target.dtype) if target.dtype is not None else np.dtype(np.float32)
        return cls(target.name, resize, crop, float(raw.get("scale", 1.0 / 255.0)), mean, std, layout, color,
                   dtype, dict(raw))

    def to_json(self) -> str:
        """The spec as stored in the model's ``preprocessing`` metadata."""
        return json.dumps(self.raw, sort_keys=True)

    def from_bytes(self, data: bytes) -> np.ndarray:
        """An encoded PNG/JPEG image (:data:`ENCODED_FORMATS`) -> the model's input layout (no
        batch dimension)."""
        return self.prepare(self._open(io.BytesIO(data), "the image", ENCODED_FORMATS))

    def from_file(self, path: str | os.PathLike) -> np.ndarray:
        """An image file of any format Pillow reads -> the model's input layout."""
        return self.prepare(self._open(path, str(path), None))

    def prepare(self, image) -> np.ndarray:
        """A decoded PIL image -> resized, center-cropped, scaled, normalized, laid out."""
        image = self._center_crop(self._resize(image))
        pixels = np.asarray(image, dtype=np.float32)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if self.color == "BGR":
            pixels = pixels[:, :, ::-1]
        pixels = (pixels * self.scale - self.mean) / self.std
        planes = pixels.transpose(2, 0, 1) if self.layout == "NCHW" else pixels
        return np.ascontiguousarray(planes).astype(self.dtype, copy=False)

    def _open(self, source, label: str, formats: tuple[str, ...] | None):
        try:
            from PIL import Image, UnidentifiedImageError
        except ImportError as err:
            raise PreprocessingError("decoding images needs Pillow: pip install pillow") from err
        what = f"a decodable {'/'.join(formats)} image" if formats else "a decodable image"
        try:
            image = Image.open(source, formats=formats)  # reads the header only
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise PreprocessingError(
                    f"{label}: {width}x{height} is {width * height:,} pixels, over the limit of "
                    f"{MAX_IMAGE_PIXELS:,} pixels per image; send a smaller image"
                )
            return image.convert("L" if self.color == "L" else "RGB")
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
            if isinstance(err, PreprocessingError):
                raise
            if isinstance(err, UnidentifiedImageError):  # its message names only the stream object
                reason = f"only {', '.join(formats)} are accepted" if formats else "unknown format"
            else:
                reason = str(err)
            raise PreprocessingError(f"{label}: not {what} ({reason})") from err

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
        raise PreprocessingError(f"preprocessing input {name!r} is not an input of the model "
                                 f"(inputs: {', '.join(s.name for s in inputs)})")
    four_d = [spec for spec in inputs if spec.shape is not None and len(spec.shape) == 4]
    if len(four_d) != 1 or len(inputs) != 1:
        raise PreprocessingError("image preprocessing needs a model with one 4-D input, or 'input' in the spec")
    return four_d[0]


def _size(value: object, what: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and value > 0:
        return (value, value)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return (value[0], value[1])
    raise PreprocessingError(f"preprocessing {what} {value!r}: expected a positive integer or [height, width]")


def _static_size(shape: tuple, layout: str) -> tuple[int, int]:
    height, width = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if not isinstance(height, int) or not isinstance(width, int):
        raise PreprocessingError("the model's image size is not static: give 'crop' in the preprocessing spec")
    return (height, width)
