"""lite.preprocessing: the image spec shared by serving and calibration."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import lite
from lite.preprocessing import ImagePreprocessing, read_spec

INPUTS = [lite.TensorSpec("data", np.dtype(np.float32), ("N", 3, 4, 4))]


def png(pixels: np.ndarray) -> bytes:
    Image = pytest.importorskip("PIL.Image", reason="decoding needs Pillow")
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_spec_from_metadata_fills_defaults_from_the_input():
    spec = ImagePreprocessing.from_metadata({"preprocessing": json.dumps({"mean": [0.5] * 3})}, INPUTS)
    assert spec.input_name == "data" and spec.crop == (4, 4) and spec.color == "RGB" and spec.layout == "NCHW"


def test_image_bytes_become_the_model_layout():
    pixels = np.full((4, 4, 3), 255, np.uint8)
    pixels[..., 1] = 0
    spec = ImagePreprocessing.from_spec({"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}, INPUTS)
    out = spec.from_bytes(png(pixels))
    assert out.shape == (3, 4, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], 1.0)
    np.testing.assert_allclose(out[1], -1.0)


@pytest.mark.parametrize("raw, message", [
    ({"colour": "RGB"}, r"unknown key\(s\) \['colour'\]"),
    ({"layout": "CHW"}, "layout 'CHW'"),
    ({"mean": [0.5]}, "mean/std need 3 values"),
    ({"crop": -1}, "crop -1"),
    ({"input": "nope"}, "'nope' is not an input"),
])
def test_bad_specs_are_typed_and_precise(raw, message):
    with pytest.raises(lite.PreprocessingError, match=message):
        ImagePreprocessing.from_spec(read_spec(raw), INPUTS)


def test_undecodable_bytes_are_a_preprocessing_error():
    pytest.importorskip("PIL.Image", reason="decoding needs Pillow")
    spec = ImagePreprocessing.from_spec({}, INPUTS)
    with pytest.raises(lite.PreprocessingError, match="not a decodable PNG/JPEG"):
        spec.from_bytes(b"not an image")


def test_encoded_bytes_must_be_png_or_jpeg_while_files_may_be_any_format(tmp_path):
    Image = pytest.importorskip("PIL.Image", reason="decoding needs Pillow")
    spec = ImagePreprocessing.from_spec({}, INPUTS)
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, format="GIF")
    with pytest.raises(lite.PreprocessingError, match=r"not a decodable PNG/JPEG image \(only PNG, JPEG are accepted\)"):
        spec.from_bytes(buffer.getvalue())
    (tmp_path / "image.gif").write_bytes(buffer.getvalue())  # a calibration set on disk
    assert spec.from_file(tmp_path / "image.gif").shape == (3, 4, 4)
