"""The OpenVINO engine: agreement with the numpy engine per precision, int8 QDQ, caches, refusals."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import lite
from lite.engines.openvino import OpenVinoRejected
from tests.lite.engines.models import cnn, custom_op_model, qdq_cnn

ov = pytest.importorskip("openvino", reason="the OpenVINO engine needs openvino (the openvino extra)")
pytest.importorskip("onnx", reason="lowering to ONNX needs onnx")

BF16_UNITS = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def inputs(batch: int = 2, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 16, 16)).astype(np.float32)


def relative_error(expected: np.ndarray, got: np.ndarray) -> float:
    return float(np.max(np.abs(expected - got)) / np.max(np.abs(expected)))


def test_exact_agrees_with_the_numpy_engine_and_computes_in_f32(tmp_path):
    data = cnn()
    x = inputs()
    reference = lite.Model.load(data, device="numpy")(x)
    model = lite.Model.load(data, engine="openvino", cache_dir=tmp_path)
    assert model.device == "openvino"
    assert model.engine.compute_precision == "f32"
    np.testing.assert_allclose(model(x), reference, rtol=1e-4, atol=1e-6)


def test_bf16_policy_uses_bf16_units_where_the_cpu_has_them(tmp_path):
    data = cnn()
    x = inputs()
    reference = lite.Model.load(data, device="numpy")(x)
    model = lite.Model.load(data, engine="openvino", precision="bf16", cache_dir=tmp_path)
    assert model.engine.compute_precision == ("bf16" if BF16_UNITS else "f32")
    assert relative_error(reference, model(x)) < 5e-2


def test_int8_qdq_model_agrees_within_one_quantization_step(tmp_path):
    data = qdq_cnn()
    x = np.random.default_rng(2).uniform(-2, 2, (1, 3, 16, 16)).astype(np.float32)
    reference = lite.Model.load(data, device="numpy")(x)
    got = lite.Model.load(data, engine="openvino", cache_dir=tmp_path)(x)
    # Output quantization step is 0.05: engines may round a value across one step.
    assert np.max(np.abs(reference - got)) <= 0.05 + 1e-6
    assert np.mean(np.abs(reference - got) > 1e-6) < 0.05


def test_symbolic_batch_runs_at_several_sizes(tmp_path):
    model = lite.Model.load(cnn(), engine="openvino", cache_dir=tmp_path)
    for batch in (1, 3):
        assert model(inputs(batch)).shape == (batch, 10)


def test_second_load_reuses_the_lowered_model_and_the_compiled_blob(tmp_path):
    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn())
    first = lite.Model.load(path, engine="openvino", cache_dir=tmp_path / "cache")
    assert first.engine.from_cache is False
    blobs = list((tmp_path / "cache" / "openvino" / "compiled").rglob("*.blob"))
    assert blobs, "OpenVINO's CACHE_DIR holds no compiled blob"
    second = lite.Model.load(path, engine="openvino", cache_dir=tmp_path / "cache")
    assert second.engine.from_cache is True
    assert sorted((tmp_path / "cache" / "openvino" / "compiled").rglob("*.blob")) == sorted(blobs)
    np.testing.assert_array_equal(first(inputs()), second(inputs()))


def test_no_cache_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model = lite.Model.load(cnn(), engine="openvino", cache_dir=None)
    assert model(inputs()).shape == (2, 10)
    assert not (tmp_path / "lite").exists()


def test_concurrent_predicts_give_the_same_results(tmp_path):
    model = lite.Model.load(cnn(), engine="openvino", cache_dir=tmp_path)
    x = inputs(4)
    expected = model(x)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: model(x), range(40)))  # errors re-raise here
    assert all(np.array_equal(result, expected) for result in results)


def test_custom_ops_are_refused_with_a_typed_error_when_forced():
    custom = lite.CustomOps()

    @custom.python("Swish2", domain="my.ops")
    def swish2(x, *, beta=1.0):
        return x / (1 + np.exp(-beta * x))

    with pytest.raises(OpenVinoRejected, match="Swish2") as caught:
        lite.Model.load(custom_op_model(), engine="openvino", custom_ops=custom, cache_dir=None)
    assert isinstance(caught.value, lite.UnsupportedOpError)


def test_auto_falls_back_when_openvino_cannot_run_the_model(tmp_path, monkeypatch):
    from lite import autotune

    monkeypatch.setattr(autotune, "DEFAULT_TIMING", autotune.Timing(rounds=1, extra_rounds=0, warmup_s=0.0, measure_s=0.01))
    custom = lite.CustomOps()

    @custom.python("Swish2", domain="my.ops")
    def swish2(x, *, beta=1.0):
        return x / (1 + np.exp(-beta * x))

    model = lite.Model.load(custom_op_model(), device="cpu", engine="auto", custom_ops=custom, cache_dir=tmp_path)
    assert "openvino" not in model.device
    assert "OpenVinoRejected" in model.engine.decision["unavailable"]["openvino:cpu"]
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(model(x), x / (1 + np.exp(-x)), rtol=1e-6)


def test_openvino_runs_on_the_cpu_only_and_names_its_options():
    with pytest.raises(lite.EngineUnavailableError, match="CPU"):
        lite.Model.load(cnn(), engine="openvino", device="cuda")
    with pytest.raises(TypeError, match="optimization"):
        lite.Model.load(cnn(), engine="openvino", optimization="all")
    with pytest.raises(ValueError, match="precision"):
        lite.Model.load(cnn(), engine="openvino", precision="int4")
