"""Every engine is a lite.engines.base.Engine: typed kind, placement and on_gpu, not a name to parse."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.engines.base import DEVICES, KINDS, Engine
from tests.lite.engines.models import cnn


def _check(engine, kind: str, placement: str) -> None:
    assert isinstance(engine, Engine)
    assert engine.kind == kind and engine.kind in KINDS
    assert engine.placement == placement and engine.on_gpu is (placement in ("cuda", "tensorrt"))
    assert engine.describe() is not None


def test_the_numpy_engine():
    model = lite.Model.load(cnn(), device="numpy")
    _check(model.engine, "numpy", "cpu")
    assert model.on_gpu is False and model.device == "numpy"


def test_onnx_runtime_on_the_cpu():
    pytest.importorskip("onnxruntime")
    model = lite.Model.load(cnn(), device="cpu", cache_dir=None)
    _check(model.engine, "onnxruntime", "cpu")
    assert model.device == "cpu"


def test_an_autotuned_choice_reports_the_placement_of_what_it_chose():
    model = lite.Model.load(cnn(), engine="auto", device="cpu", cache_dir=None, batch_sizes=[1])
    _check(model.engine, "auto", "cpu")
    x = np.zeros((1, 3, 16, 16), np.float32)
    assert model.predict({"x": x})["probabilities"].shape == (1, 10)


def test_one_list_of_devices():
    from serving import config, settings

    assert DEVICES == lite.model.DEVICES
    for device in DEVICES:
        settings.Settings(device=device)
        config.parse_config({"device": device}, "cfg")
