"""The image preprocessing spec for calibration: :mod:`lite.preprocessing` with this package's errors.

The spec is the one the server reads from a model's ``preprocessing`` metadata, so calibration
images are prepared exactly as served requests will be; ``lite convert --calib images/
--preprocess spec.json`` stores it in the model (see lite/preprocessing.py for the keys).
"""

from __future__ import annotations

import os
from typing import Any

from converter.quantize.errors import CalibrationDataError
from lite.errors import PreprocessingError
from lite.preprocessing import METADATA_KEY, ImagePreprocessing
from lite.preprocessing import read_spec as _read_spec

__all__ = ["METADATA_KEY", "ImageSpec", "bind_spec", "read_spec"]


class ImageSpec:
    """A spec bound to one model input; ``load(path)`` gives the model-layout array of one image."""

    def __init__(self, spec: ImagePreprocessing) -> None:
        self.spec = spec
        self.input_name = spec.input_name

    def to_json(self) -> str:
        return self.spec.to_json()

    def load(self, path: os.PathLike | str):
        try:
            return self.spec.from_file(path)
        except PreprocessingError as err:
            raise CalibrationDataError(f"{err}; remove it from the folder or fix the spec") from err


def read_spec(spec: str | os.PathLike | dict[str, Any] | None) -> dict[str, Any]:
    try:
        return _read_spec(spec)
    except PreprocessingError as err:
        raise CalibrationDataError(str(err)) from err


def bind_spec(raw: dict[str, Any], inputs: list[tuple[str, Any, tuple]]) -> ImageSpec:
    """Check ``raw`` against the model's inputs ``(name, dtype, shape)`` and fill in defaults."""
    described = [_Input(name, dtype, shape) for name, dtype, shape in inputs]
    try:
        return ImageSpec(ImagePreprocessing.from_spec(raw, described))
    except PreprocessingError as err:
        raise CalibrationDataError(str(err)) from err


class _Input:
    def __init__(self, name: str, dtype: Any, shape: tuple) -> None:
        self.name, self.dtype, self.shape = name, dtype, shape
