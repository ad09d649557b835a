"""The image preprocessing spec: resize, center crop, scale, mean/std, color, layout.

The same JSON object the serving layer reads from a model's ``preprocessing`` metadata
(``serving/processing.py``), so calibration images are prepared exactly as served requests will
be, and ``lite convert --calib images/ --preprocess spec.json`` stores the spec in the model::

    {"resize": 256,             # shorter side to 256 (or [height, width] exactly)
     "crop": 224,               # center crop (or [height, width]); alias "center_crop"
     "scale": 0.00392156862745098,   # pixel multiplier before mean/std (default 1/255)
     "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
     "layout": "NCHW",          # or "NHWC"
     "color": "RGB",            # or "BGR" or "L" (grayscale)
     "input": "data"}           # the model input that gets the images (default: the only 4-D one)

Missing sizes come from the model input's static height and width. Decoding needs Pillow.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converter.quantize.errors import CalibrationDataError

METADATA_KEY = "preprocessing"
KEYS = ("resize", "crop", "center_crop", "scale", "mean", "std", "layout", "color", "input")


@dataclass(frozen=True)
class ImageSpec:
    """A parsed, checked preprocessing spec bound to one model input."""

    input_name: str
    resize: int | tuple[int, int] | None
    crop: tuple[int, int]
    scale: float
    mean: np.ndarray
    std: np.ndarray
    layout: str
    color: str
    raw: dict[str, Any]

    def to_json(self) -> str:
        """The spec as stored in the model's ``preprocessing`` metadata (what serving reads)."""
        return json.dumps(self.raw, sort_keys=True)

    def load(self, path: Path) -> np.ndarray:
        """One image file -> the model's input layout (no batch dimension), float32."""
        try:
            from PIL import Image
        except ImportError as err:
            raise CalibrationDataError("reading calibration images needs Pillow: pip install pillow") from err
        try:
            with Image.open(path) as opened:
                image = opened.convert("L" if self.color == "L" else "RGB")
        except (OSError, ValueError) as err:
            raise CalibrationDataError(f"{path}: not a decodable image ({err}); remove it from the folder") from err
        image = self._center_crop(self._resize(image))
        pixels = np.asarray(image, dtype=np.float32)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if self.color == "BGR":
            pixels = pixels[:, :, ::-1]
        pixels = (pixels * self.scale - self.mean) / self.std
        return np.ascontiguousarray(pixels.transpose(2, 0, 1) if self.layout == "NCHW" else pixels, dtype=np.float32)

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


def read_spec(spec: str | os.PathLike | dict[str, Any] | None) -> dict[str, Any]:
    """A spec given as a dict, JSON text or a JSON file path."""
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
                raise CalibrationDataError(f"preprocessing spec {spec}: cannot read ({err.strerror})") from err
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise CalibrationDataError(f"preprocessing spec is not valid JSON: {err}") from err
    if not isinstance(raw, dict):
        raise CalibrationDataError("the preprocessing spec must be a JSON object (see docs/quantization.md)")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise CalibrationDataError(f"preprocessing spec: unknown key(s) {unknown}; known keys: {', '.join(KEYS)}")
    return raw


def bind_spec(raw: dict[str, Any], inputs: list[tuple[str, Any, tuple]]) -> ImageSpec:
    """Check ``raw`` against the model's inputs ``(name, dtype, shape)`` and fill in defaults."""
    name = raw.get("input")
    candidates = [entry for entry in inputs if entry[2] is not None and len(entry[2]) == 4]
    if name is not None:
        matches = [entry for entry in inputs if entry[0] == name]
        if not matches:
            raise CalibrationDataError(f"preprocessing input {name!r} is not an input of the model "
                                       f"(inputs: {', '.join(e[0] for e in inputs)})")
        target = matches[0]
    elif len(candidates) == 1 and len(inputs) == 1:
        target = candidates[0]
    else:
        raise CalibrationDataError("image calibration data needs a model with one 4-D input, or 'input' in the spec")
    layout = raw.get("layout", "NCHW")
    shape = target[2]
    channels_dim = shape[1] if layout == "NCHW" else shape[3]
    color = raw.get("color", "L" if channels_dim == 1 else "RGB")
    if layout not in ("NCHW", "NHWC") or color not in ("RGB", "BGR", "L"):
        raise CalibrationDataError(f"preprocessing layout {layout!r} / color {color!r}: expected NCHW|NHWC and RGB|BGR|L")
    crop = _size(raw.get("crop", raw.get("center_crop")), "crop")
    if crop is None:
        height, width = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
        if not isinstance(height, int) or not isinstance(width, int):
            raise CalibrationDataError("the model's image size is not static: give 'crop' in the preprocessing spec")
        crop = (height, width)
    resize = raw.get("resize")
    if isinstance(resize, list):
        resize = _size(resize, "resize")
    elif resize is not None and not (isinstance(resize, int) and resize > 0):
        raise CalibrationDataError(f"preprocessing resize {resize!r}: expected a positive integer or [height, width]")
    planes = 1 if color == "L" else 3
    mean = np.asarray(raw.get("mean", [0.0] * planes), dtype=np.float32)
    std = np.asarray(raw.get("std", [1.0] * planes), dtype=np.float32)
    if mean.shape != (planes,) or std.shape != (planes,) or np.any(std == 0):
        raise CalibrationDataError(f"preprocessing mean/std need {planes} values each (std non-zero) for color {color}")
    return ImageSpec(target[0], resize, crop, float(raw.get("scale", 1.0 / 255.0)), mean, std, layout, color, raw)


def _size(value: object, what: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and value > 0:
        return (value, value)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return (value[0], value[1])
    raise CalibrationDataError(f"preprocessing {what} {value!r}: expected a positive integer or [height, width]")
