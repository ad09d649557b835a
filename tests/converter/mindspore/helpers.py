"""Shared helpers: the fixture folder, running a .lite file, and comparing with MindSpore."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import lite

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mindspore"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text()) if (FIXTURES / "manifest.json").exists() else {}
KEY = bytes.fromhex(MANIFEST.get("aes_key_hex", "000102030405060708090a0b0c0d0e0f"))
TOLERANCE = 1e-5


def expected(name: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The input and MindSpore's outputs saved by the fixture script."""
    data = np.load(FIXTURES / f"{name}.npz")
    count = len([key for key in data.files if key.startswith("output_")])
    return data["input"], [data[f"output_{i}"] for i in range(count)]


def run_lite(path: Path, x: np.ndarray) -> list[np.ndarray]:
    model = lite.Model.load(str(path), device="numpy")
    name = model.inputs[0].name
    outputs = model.predict({name: x})
    if isinstance(outputs, dict):
        return [outputs[spec.name] for spec in model.outputs]
    return list(outputs)


def assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"output {index}: shape {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE, err_msg=f"output {index}")
