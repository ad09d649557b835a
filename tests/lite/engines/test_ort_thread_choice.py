"""Fewer ONNX Runtime threads for a small model's small calls on a CPU with many cores
(lite.engines.ort.thread_choice): timed at load, recorded, reused, and only for calls no larger
than the timed one. This machine's core count is stood in for where the rule needs many."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from tests.lite.engines.models import cnn

pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")

from lite.engines.ort import int8_choice, thread_choice  # noqa: E402


@pytest.fixture
def sixteen_cores(monkeypatch):
    monkeypatch.setattr(thread_choice, "usable_cores", lambda: 16)
    # Every call counts as small: on a slow or busy machine this model's call may pass the 10 ms
    # gate, and then nothing is timed (behaviour, not this machine's speed, is under test).
    monkeypatch.setattr(thread_choice, "SMALL_CALL_MS", float("inf"))


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn())
    return path


def _timed(monkeypatch, ratio_two: float, ratio_four: float) -> None:
    def alternate(calls, feeds, rounds, warmup_s, measure_s):
        assert set(calls) == {"default", "2", "4"}
        return {"default": [1.0] * rounds, "2": [ratio_two] * rounds, "4": [ratio_four] * rounds}

    monkeypatch.setattr(int8_choice, "alternate", alternate)


def _expected(path, x):
    return lite.Model.load(path, device="numpy").predict({"x": x})["probabilities"]


def test_fewer_threads_serve_small_calls_and_the_default_larger_ones(sixteen_cores, model_file, tmp_path, monkeypatch):
    _timed(monkeypatch, ratio_two=0.5, ratio_four=0.7)
    model = lite.Model.load(model_file, device="cpu", cache_dir=tmp_path / "cache")
    decision = model.engine.threads_decision
    assert decision["chosen"] == "2" and decision["reused"] is False and decision["settled"] is True
    assert decision["max_elements"] == 3 * 16 * 16 and "2 threads took 0.50x" in decision["why"]
    direct = model.engine.direct
    assert isinstance(direct, thread_choice.SizedSessions)
    calls = []
    for name in ("small", "default"):
        session = getattr(direct, name)
        monkeypatch.setattr(session, "run_arrays", lambda names, feeds, s=session, n=name: (
            calls.append(n), type(s).run_arrays(s, names, feeds))[1])
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    expected = _expected(model_file, x)
    np.testing.assert_allclose(model.predict({"x": x[:1]})["probabilities"], expected[:1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(model.predict({"x": x})["probabilities"], expected, rtol=1e-4, atol=1e-6)
    assert calls == ["small", "default"]

    def no_timing(*args, **kwargs):
        raise AssertionError("a recorded choice is not timed again")

    monkeypatch.setattr(int8_choice, "alternate", no_timing)
    again = lite.Model.load(model_file, device="cpu", cache_dir=tmp_path / "cache")
    assert again.engine.threads_decision["reused"] is True
    assert isinstance(again.engine.direct, thread_choice.SizedSessions)
    assert len(list((tmp_path / "cache" / "ort" / "threads").glob("*.json"))) == 1


def test_the_default_stays_unless_fewer_threads_are_clearly_faster(sixteen_cores, model_file, tmp_path, monkeypatch):
    _timed(monkeypatch, ratio_two=0.97, ratio_four=1.2)
    model = lite.Model.load(model_file, device="cpu", cache_dir=tmp_path / "cache")
    assert model.engine.threads_decision["chosen"] == "default"
    assert model.engine.direct is model.engine.segments[0].runner


def test_real_timing_on_this_machine_keeps_answers_exact(sixteen_cores, model_file, tmp_path):
    model = lite.Model.load(model_file, device="cpu", cache_dir=tmp_path / "cache")
    decision = model.engine.threads_decision
    assert decision["chosen"] in ("default", "2", "4") and set(decision["ms"]) == {"default", "2", "4"}
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = _expected(model_file, x)
    for batch in (1, 2):
        np.testing.assert_allclose(model.predict({"x": x[:batch]})["probabilities"], expected[:batch],
                                   rtol=1e-4, atol=1e-6)


def test_nothing_is_timed_with_few_cores_or_a_thread_count_given(model_file, tmp_path, monkeypatch):
    monkeypatch.setattr(thread_choice, "usable_cores", lambda: thread_choice.MIN_CORES - 1)
    assert lite.Model.load(model_file, device="cpu", cache_dir=None).engine.threads_decision is None
    monkeypatch.setattr(thread_choice, "usable_cores", lambda: 16)
    assert lite.Model.load(model_file, device="cpu", threads=2, cache_dir=None).engine.threads_decision is None


def test_a_model_its_random_inputs_cannot_run_keeps_the_default_and_says_why(sixteen_cores, model_file, tmp_path,
                                                                             monkeypatch):
    def refuse(model):
        raise ValueError("cannot make random data of type bfloat16")

    monkeypatch.setattr(int8_choice, "random_feeds", refuse)
    model = lite.Model.load(model_file, device="cpu", cache_dir=tmp_path / "cache")
    decision = model.engine.threads_decision
    assert decision == {"chosen": "default", "why": "not measured: ValueError: cannot make random data of type bfloat16"}
    assert model.engine.direct is model.engine.segments[0].runner
    assert not (tmp_path / "cache" / "ort" / "threads").exists()

