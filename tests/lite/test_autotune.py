"""Engine autotuning: choice per batch bucket, agreement check, the recorded decision and its reuse.

Runs without OpenVINO: the candidates are the numpy engine, ONNX Runtime's CPU provider and fake
engines registered in ``lite.engines.ENGINES`` for the duration of a test.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

import lite
import lite.format
from lite import autotune
from lite.cli import main
from lite.engines import ENGINES, EngineEntry
from lite.format import GraphBuilder, to_bytes
from tests.lite.engines.models import cnn

pytest.importorskip("onnxruntime", reason="autotuning is tested with numpy vs ONNX Runtime")

FAST = autotune.Timing(rounds=2, extra_rounds=2, warmup_s=0.0, measure_s=0.01, min_calls=3)


@pytest.fixture(autouse=True)
def fast_timing(monkeypatch):
    monkeypatch.setattr(autotune, "DEFAULT_TIMING", FAST)


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn())
    return path


class FakeEngine:
    """The numpy engine's outputs (computed once per input shape), after sleeping ``delay(batch)``
    seconds, optionally corrupted: its speed is the sleep alone."""

    def __init__(self, model, name, delay, corrupt=False):
        from lite.engines.numpy_engine import NumpyEngine

        self.inner = NumpyEngine(model)
        self.name = name
        self.kind, self.placement, self.on_gpu = "numpy", "cpu", False  # lite.engines.base.Engine
        self.delay = delay
        self.corrupt = corrupt
        self.memo = {}

    def run(self, feeds):
        key = tuple(value.shape for value in feeds.values())
        if key not in self.memo:
            self.memo[key] = self.inner.run(feeds)
        outputs = self.memo[key]
        time.sleep(self.delay(next(iter(feeds.values())).shape[0]))
        return {k: v + 1.0 for k, v in outputs.items()} if self.corrupt else outputs


def small_batches_fast(model, request):
    return FakeEngine(model, "small", lambda batch: 0.0 if batch <= 2 else 0.03)


def large_batches_fast(model, request):
    return FakeEngine(model, "large", lambda batch: 0.03 if batch <= 2 else 0.0)


def fast_but_wrong(model, request):
    return FakeEngine(model, "wrong", lambda batch: 0.0, corrupt=True)


def register(monkeypatch, **factories):
    table = dict(ENGINES)
    for name, function in factories.items():
        table[name] = EngineEntry(f"{__name__}:{function}", (), ("cpu",))
    monkeypatch.setattr("lite.engines.ENGINES", table)
    monkeypatch.setattr(autotune, "ENGINES", table)


def test_numpy_versus_onnxruntime_records_a_decision_that_the_next_load_reuses(model_file, tmp_path, monkeypatch):
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    reference = lite.Model.load(model_file, device="numpy")(x)
    first = lite.Model.load(model_file, device="cpu", engine="auto", cache_dir=tmp_path / "cache")
    decision = first.engine.decision
    assert decision["reused"] is False
    bucket = decision["buckets"][0]
    assert set(bucket["candidates"]) >= {"numpy", "onnxruntime:cpu"}
    assert bucket["candidates"]["onnxruntime:cpu"]["error"] < 1e-3
    assert all("ms" in entry for entry in bucket["candidates"].values())
    np.testing.assert_allclose(first(x), reference, rtol=1e-4, atol=1e-6)
    recorded = json.loads((tmp_path / "cache" / "autotune").glob("*.json").__next__().read_text())
    assert recorded["fingerprint"]["model"].startswith(os.path.realpath(model_file))
    assert recorded["buckets"][0]["chosen"] == bucket["chosen"]

    def no_measuring(*args, **kwargs):
        raise AssertionError("the recorded decision should have been reused")

    monkeypatch.setattr(autotune, "_measure", no_measuring)
    second = lite.Model.load(model_file, device="cpu", engine="auto", cache_dir=tmp_path / "cache")
    assert second.engine.decision["reused"] is True
    assert second.device == first.device


@pytest.mark.parametrize("change", ["model file", "engine versions", "hardware"])
def test_decision_is_measured_again_when_model_versions_or_hardware_change(change, model_file, tmp_path, monkeypatch):
    lite.Model.load(model_file, device="cpu", engine="auto", cache_dir=tmp_path)
    if change == "model file":
        model_file.write_bytes(cnn(seed=1))
    elif change == "engine versions":
        monkeypatch.setattr(autotune, "engine_versions", lambda: {"onnxruntime": "0.0.1"})
    else:
        real = autotune.hardware_fingerprint
        monkeypatch.setattr(autotune, "hardware_fingerprint", lambda: {**real(), "cpu": "another cpu"})
    again = lite.Model.load(model_file, device="cpu", engine="auto", cache_dir=tmp_path)
    assert again.engine.decision["reused"] is False
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 1  # rewritten, not accumulated


def test_fastest_engine_is_chosen_per_batch_bucket(model_file, tmp_path, monkeypatch):
    register(monkeypatch, small="small_batches_fast", large="large_batches_fast")
    ir_model = lite.format.load(model_file)
    engine = autotune.tune(ir_model, identity=autotune.model_identity(model_file), batch_sizes=(8, 1),
                           cache_dir=tmp_path, engines=("small", "large"))
    chosen = {b["batch"]: b["chosen"] for b in engine.decision["buckets"]}
    assert chosen == {1: "small:cpu", 8: "large:cpu"}
    assert engine.name == "small|large"
    assert engine.engine_for(1).name == "small"
    assert engine.engine_for(2).name == "large"  # the smallest bucket not below 2 is 8
    assert engine.engine_for(64).name == "large"  # beyond the buckets: the largest
    model = lite.Model(ir_model, engine)
    assert model(np.zeros((3, 3, 16, 16), np.float32)).shape == (3, 10)


def test_engine_that_disagrees_with_numpy_is_not_chosen_and_the_reason_is_recorded(model_file, tmp_path, monkeypatch):
    register(monkeypatch, wrong="fast_but_wrong")
    model = lite.Model.load(model_file, engine="auto", cache_dir=tmp_path)
    bucket = model.engine.decision["buckets"][0]
    assert bucket["chosen"] != "wrong:cpu"
    assert "max error" in bucket["candidates"]["wrong:cpu"]["rejected"]
    assert "ms" not in bucket["candidates"]["wrong:cpu"]


def test_models_from_bytes_are_keyed_on_their_content(tmp_path):
    first = lite.Model.load(cnn(), device="cpu", engine="auto", cache_dir=tmp_path)
    second = lite.Model.load(cnn(), device="cpu", engine="auto", cache_dir=tmp_path)
    assert second.engine.decision["reused"] is True
    assert first.engine.decision["fingerprint"]["model"].startswith("sha256:")


def test_named_engines_and_argument_checks(model_file):
    assert lite.Model.load(model_file, engine="numpy").device == "numpy"
    assert lite.Model.load(model_file, engine="onnxruntime", device="cpu", cache_dir=None).device == "cpu"
    with pytest.raises(ValueError, match="engine must be"):
        lite.Model.load(model_file, engine="tflite")
    with pytest.raises(TypeError, match="batch_sizes"):
        lite.Model.load(model_file, batch_sizes=(1, 8))
    with pytest.raises(TypeError, match="do not apply to engine='auto'"):
        lite.Model.load(model_file, engine="auto", optimization="all")
    with pytest.raises(ValueError, match="precision"):
        lite.Model.load(model_file, engine="auto", precision="int4")


PRECISIONS_SEEN: list = []


def recording(model, request):
    PRECISIONS_SEEN.append(request.precision)
    return FakeEngine(model, "recording", lambda batch: 0.0)


def test_an_unnamed_precision_is_the_one_the_model_was_converted_for(model_file, tmp_path, monkeypatch):
    """float16 weights (lite convert --fp16) mean "fp16" to a named engine and to autotuning,
    float32 ones "exact"; a precision the caller names wins."""
    b = GraphBuilder("half", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    w = b.node("Cast", [b.constant("w", np.eye(4, dtype=np.float16))], to=1)
    b.output(b.node("MatMul", [x, w], outputs=["y"]), np.float32, ["N", 4])
    half = tmp_path / "half.lite"
    half.write_bytes(to_bytes(b.build()))
    register(monkeypatch, recording="recording")
    PRECISIONS_SEEN.clear()
    for path in (half, model_file):
        lite.Model.load(path, engine="recording", device="cpu")
    lite.Model.load(half, engine="recording", device="cpu", precision="exact")
    assert PRECISIONS_SEEN == ["fp16", "exact", "exact"]
    # The recording engine leaves with its registration: it answers from a cache keyed by shape, and
    # on a slow machine it out-ran ONNX Runtime in autotuning and answered the tuning input's output.
    monkeypatch.undo()
    tuned = lite.Model.load(half, engine="auto", device="cpu", cache_dir=None, batch_sizes=(1,))
    assert tuned.engine.decision["settings"]["precision"] == "fp16"
    np.testing.assert_allclose(tuned.predict({"x": np.ones((1, 4), np.float32)})["y"], np.ones((1, 4)))


def test_agreement_checks_shapes_nans_and_integer_outputs():
    a = {"y": np.array([1.0, 2.0, 4.0], np.float32)}
    assert autotune.agreement(a, {"y": a["y"] + 1e-5}, 1e-3)[1] is None
    assert "max error" in autotune.agreement(a, {"y": a["y"] * 1.1}, 1e-3)[1]
    assert "shape" in autotune.agreement(a, {"y": a["y"][:2]}, 1e-3)[1]
    assert "NaN" in autotune.agreement(a, {"y": np.array([1.0, np.nan, 4.0], np.float32)}, 1e-3)[1]
    labels = {"k": np.arange(10)}
    assert "differ" in autotune.agreement(labels, {"k": np.r_[np.arange(9), 0]}, 1e-3)[1]


def test_bench_autotune_prints_the_table_and_times_the_choice(model_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    report = tmp_path / "bench.json"
    assert main(["bench", str(model_file), "--autotune", "1,4", "--device", "cpu", "--loops", "2", "--warmup", "0",
                 "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "chosen" in out and "onnxruntime:cpu" in out and "numpy" in out
    results = json.loads(report.read_text())
    assert [b["batch"] for b in results["autotune"]["buckets"]] == [1, 4]
    assert list((tmp_path / "lite" / "autotune").glob("*.json"))


def test_models_without_random_inputs_stay_on_the_numpy_engine():
    from lite.format import GraphBuilder, to_bytes

    b = GraphBuilder("strings", opset=17)
    x = b.input("x", object, ["N"])
    b.output(b.node("Identity", [x], outputs=["y"]), object, ["N"])
    model = lite.Model.load(to_bytes(b.build()), engine="auto", cache_dir=None)
    assert model.device == "numpy"
    assert "not measured" in model.engine.decision["buckets"][0]["note"]
    assert model.predict({"x": np.array([b"a\xff"], dtype=object)})["y"][0] == b"a\xff"


def test_a_decision_that_cannot_be_saved_still_binds_with_a_warning(model_file, tmp_path):
    # An edge service with no writable HOME: the load failed with PermissionError after measuring.
    blocker = tmp_path / "a file, not a folder"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="cannot be saved"):
        model = lite.Model.load(model_file, device="cpu", engine="auto", cache_dir=blocker / "cache")
    assert model.engine.decision["reused"] is False and "not_saved" in model.engine.decision
    assert model.predict({"x": np.ones((1, 3, 16, 16), np.float32)})
