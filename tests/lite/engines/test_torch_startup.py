"""The torch engine's start-up policies (fast / best / background upgrade) and precompiled
packages, on the CPU with one-node models (the mechanism is the same as on CUDA, where the fast
configuration is also replayed from a CUDA graph), and the CUDA-only parts marked ``gpu``."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from tests.lite.engines.models import Const, one_node

torch = pytest.importorskip("torch", reason="the torch engine needs PyTorch (the torch extra)")

from lite.commands.compile_model import COMPILING_MODES  # noqa: E402
from lite.engines.torch import (
    TorchEngine,  # noqa: E402
    mode_choice,  # noqa: E402
    precompiled,  # noqa: E402
)
from lite.engines.torch.compiler import AUTO_CANDIDATES, MODES, AotCompiled, AotUnavailable  # noqa: E402

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_model(size: int = 6):
    """A one-node model; tests that must compile take a size of their own (Inductor's cache
    folder is process-wide: the first engine's cache_dir holds every test's artifacts)."""
    return one_node("Conv", [f32(1, 3, size, size), Const(f32(2, 3, 3, 3))], pads=[1, 1, 1, 1],
                    fused_activation="Relu")


def runner_of(engine: TorchEngine):
    return next(s.runner for s in engine.segments if s.on_torch)


def test_startup_policy_is_checked_and_defaults_by_device():
    model, _ = conv_model()
    assert TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None).startup == "best"
    with pytest.raises(ValueError, match="startup must be one of background, fast, best; got 'soon'"):
        TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None, startup="soon")


def test_fast_start_compiles_nothing(tmp_path):
    model, feeds = conv_model(10)
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path, startup="fast")
    expected = NumpyEngine(model).run(feeds)["out0"]
    np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert list(engine.startup_state()["shapes"].values()) == ["fast"]
    assert runner_of(engine).artifact_keys == []


@pytest.mark.slow
def test_background_upgrade_answers_at_once_then_swaps_in_the_compiled_artifact(tmp_path, caplog):
    model, feeds = conv_model(8)
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path, startup="background")
    expected = NumpyEngine(model).run(feeds)["out0"]
    with caplog.at_level(logging.INFO, logger="lite.engines.torch"):
        first = engine.run(feeds)["out0"]  # the fast configuration (the module, uncompiled)
        assert set(engine.startup_state()["shapes"].values()) <= {"compiling", "best"}
        assert engine.wait_until_best(timeout=300)
    np.testing.assert_allclose(first, expected, rtol=1e-4, atol=1e-5)
    assert list(engine.startup_state()["shapes"].values()) == ["best"]
    assert "replaced the fast one" in caplog.text
    np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    # The artifact was saved: a new engine at the same shape starts with the best configuration.
    again = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path, startup="background")
    np.testing.assert_allclose(again.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert list(again.startup_state()["shapes"].values()) == ["best"]


@pytest.mark.slow
def test_a_failed_upgrade_keeps_the_fast_configuration_and_says_why(tmp_path, monkeypatch):
    model, feeds = conv_model(7)

    def refuse(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch._inductor, "standalone_compile", refuse)
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path, startup="background")
    engine.run(feeds)
    assert engine.wait_until_best(timeout=120)
    # No torch.compile in the background either: its first call would compile in a request.
    state = engine.startup_state()
    assert list(state["shapes"].values()) == ["fast (upgrade failed)"]
    assert list(state["errors"].values()) == ["AotUnavailable: standalone_compile failed: RuntimeError: no compiler here"]
    np.testing.assert_allclose(engine.run(feeds)["out0"], NumpyEngine(model).run(feeds)["out0"], rtol=1e-4, atol=1e-5)


def _package_from_cache(engine: TorchEngine, folder, built_for: dict) -> None:
    (folder / "compiled").mkdir(parents=True)
    keys = runner_of(engine).artifact_keys
    for key in keys:
        shutil.copytree(engine.cache_dir / "compiled" / key, folder / "compiled" / key)
    manifest = {"built_for": built_for, "model_sha256": None, "batch_sizes": [1], "artifacts": keys}
    (folder / precompiled.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.slow
def test_a_matching_package_is_installed_and_a_mismatch_says_why(tmp_path):
    model, feeds = conv_model(9)
    builder = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path / "build")
    builder.run(feeds)
    here = precompiled.environment(torch.device("cpu"))
    _package_from_cache(builder, tmp_path / "pkg", here)

    package = precompiled.open_package(tmp_path / "pkg", torch.device("cpu"), None)
    assert package.applies
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path / "deploy",
                         startup="fast", precompiled=package)
    np.testing.assert_allclose(engine.run(feeds)["out0"], NumpyEngine(model).run(feeds)["out0"], rtol=1e-4, atol=1e-5)
    # fast start, yet the packaged artifact serves at once: nothing was compiled here
    assert list(engine.startup_state()["shapes"].values()) == ["best"]
    assert package.used and (engine.cache_dir / "compiled" / package.used[0]).is_dir()

    other = dict(here, gpu_arch="sm_80", gpu_name="NVIDIA A100")
    shutil.rmtree(tmp_path / "pkg")
    _package_from_cache(builder, tmp_path / "pkg", other)
    stale = precompiled.open_package(tmp_path / "pkg", torch.device("cpu"), None)
    assert stale.mismatch.startswith("built for GPU architecture sm_80 (NVIDIA A100), this GPU is cpu")
    fallback = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path / "other",
                           startup="fast", precompiled=stale)
    fallback.run(feeds)
    assert stale.used == [] and stale.artifact(package.used[0]) is None  # nothing taken from it
    assert fallback.startup_state()["precompiled"]["mismatch"] == stale.mismatch


def _two_candidates(module, folder, **kwargs):
    """An ``auto`` runner on the CPU: default and reduce-overhead compile the same artifact there
    (no CUDA graphs), which is enough to exercise the timing and its record."""
    return AotCompiled(module, "auto", folder, cuda_graphs=False, candidates=("default", "reduce-overhead"), **kwargs)


def test_auto_means_default_on_the_cpu_and_compile_lists_every_compiling_mode():
    model, _ = conv_model()
    assert TorchEngine(model, device="cpu", mode="auto", aot=True, cache_dir=None).mode == "default"
    assert TorchEngine(model, device="cpu", aot=True, cache_dir=None).mode == "default"
    assert COMPILING_MODES == tuple(m for m in MODES if m != "eager")
    assert AUTO_CANDIDATES == ("max-autotune", "reduce-overhead")


@pytest.mark.slow
def test_auto_times_the_candidates_once_and_a_later_runner_reuses_the_choice(tmp_path, monkeypatch):
    model, feeds = conv_model(11)
    module = runner_of(TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None)).module
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    expected = NumpyEngine(model).run(feeds)["out0"]
    first = _two_candidates(module, tmp_path)
    np.testing.assert_allclose(first(*args)[0].numpy(), expected, rtol=1e-4, atol=1e-5)
    key = first.key(args, "auto")
    record = json.loads((tmp_path / mode_choice.FOLDER / f"{key}.json").read_text())
    assert record["mode"] in ("default", "reduce-overhead") and record["shapes"] == [[1, 3, 11, 11]]
    assert set(record["ms_per_call"]) == {"default", "reduce-overhead"}
    assert all(ms > 0 for ms in record["ms_per_call"].values())
    assert first.modes_used == {next(iter(first.runners)): record["mode"]}
    assert first.artifact_keys == [first.key(args, record["mode"])]  # the winner only, for lite compile

    def no_timing(*_args, **_kwargs):
        raise AssertionError("a known choice must not be timed again")

    monkeypatch.setattr(mode_choice, "time_calls", no_timing)
    again = _two_candidates(module, tmp_path)  # a later process: the choice read from the cache
    np.testing.assert_allclose(again(*args)[0].numpy(), expected, rtol=1e-4, atol=1e-5)
    assert list(again.modes_used.values()) == [record["mode"]]
    # From a package: the manifest's choices, with nothing in the new cache.
    shutil.copytree(tmp_path / "compiled", tmp_path / "pkg" / "compiled")
    manifest = {"built_for": precompiled.environment(torch.device("cpu")), "artifacts": first.artifact_keys,
                "choices": {key: record}}
    (tmp_path / "pkg" / precompiled.MANIFEST).write_text(json.dumps(manifest))
    package = precompiled.open_package(tmp_path / "pkg", torch.device("cpu"), None)
    assert package.choice(key) == record
    deployed = _two_candidates(module, tmp_path / "deploy", startup="fast", package=package)
    np.testing.assert_allclose(deployed(*args)[0].numpy(), expected, rtol=1e-4, atol=1e-5)
    assert list(deployed.tiers.values()) == ["best"] and package.used == first.artifact_keys


@pytest.mark.slow
def test_auto_takes_a_single_mode_package_as_it_is(tmp_path, monkeypatch):
    """A package made with ``lite compile --mode NAME`` records no choice: its artifact serves
    untimed, and the other candidate is not compiled."""
    model, feeds = conv_model(13)
    module = runner_of(TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None)).module
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    builder = AotCompiled(module, "default", tmp_path / "build", cuda_graphs=False)
    builder(*args)
    shutil.copytree(tmp_path / "build" / "compiled", tmp_path / "pkg" / "compiled")
    manifest = {"built_for": precompiled.environment(torch.device("cpu")), "artifacts": builder.artifact_keys}
    (tmp_path / "pkg" / precompiled.MANIFEST).write_text(json.dumps(manifest))
    package = precompiled.open_package(tmp_path / "pkg", torch.device("cpu"), None)

    def refuse(*_args, **_kwargs):
        raise AssertionError("nothing is compiled or timed when the package has the artifact")

    monkeypatch.setattr(mode_choice, "time_calls", refuse)
    monkeypatch.setattr(torch._inductor, "standalone_compile", refuse)
    runner = AotCompiled(module, "auto", tmp_path / "deploy", cuda_graphs=False, startup="fast", package=package,
                         candidates=("max-autotune-no-cudagraphs", "default"))
    np.testing.assert_allclose(runner(*args)[0].numpy(), NumpyEngine(model).run(feeds)["out0"], rtol=1e-4, atol=1e-5)
    assert list(runner.tiers.values()) == ["best"] and list(runner.modes_used.values()) == ["default"]
    assert package.used == builder.artifact_keys


@pytest.mark.slow
def test_auto_keeps_serving_when_one_candidate_cannot_be_compiled(tmp_path, monkeypatch):
    model, feeds = conv_model(12)
    module = runner_of(TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None)).module
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    runner = _two_candidates(module, tmp_path)
    real = runner._artifact

    def refuse_reduce_overhead(args, mode):
        if mode == "reduce-overhead":
            raise AotUnavailable("standalone_compile failed: RuntimeError: out of registers")
        return real(args, mode)

    monkeypatch.setattr(runner, "_artifact", refuse_reduce_overhead)
    np.testing.assert_allclose(runner(*args)[0].numpy(), NumpyEngine(model).run(feeds)["out0"], rtol=1e-4, atol=1e-5)
    record = runner.choices[runner.key(args, "auto")]
    assert record["mode"] == "default" and record["ms_per_call"] == {"default": None}
    assert record["failed"] == {"reduce-overhead": "AotUnavailable: standalone_compile failed: RuntimeError: "
                                                   "out of registers"}
    assert runner.aot_declined is None


@pytest.mark.slow
def test_auto_serves_the_first_candidate_when_timing_fails_and_keeps_no_record(tmp_path, monkeypatch):
    model, feeds = conv_model(14)
    module = runner_of(TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None)).module
    args = tuple(torch.from_numpy(v) for v in feeds.values())

    def broken(*_args, **_kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(mode_choice, "time_calls", broken)
    runner = _two_candidates(module, tmp_path)
    np.testing.assert_allclose(runner(*args)[0].numpy(), NumpyEngine(model).run(feeds)["out0"], rtol=1e-4, atol=1e-5)
    record = runner.choices[runner.key(args, "auto")]
    assert record["mode"] == "default" and record["untimed"].startswith("RuntimeError: CUDA error")
    assert not (tmp_path / mode_choice.FOLDER).exists()  # the next process times again


def test_package_mismatch_reasons():
    here = {"format": 1, "gpu_arch": "sm_90", "torch": "2.11.0", "cuda": "13.0", "triton": "3.6.0",
            "lowering": "abc", "gpu_name": "NVIDIA H200"}
    assert precompiled.mismatch({"built_for": here}, here, None) is None
    assert precompiled.mismatch({"built_for": dict(here, torch="2.10.0")}, here, None) == (
        "built with torch 2.10.0, this machine has 2.11.0; run lite compile again")
    assert "another model file" in precompiled.mismatch({"built_for": here, "model_sha256": "a" * 64}, here, "b" * 64)
    assert "another version of lite's torch lowering" in precompiled.mismatch(
        {"built_for": dict(here, lowering="old")}, here, None)


def test_an_unreadable_package_is_a_mismatch_and_a_missing_path_an_error(tmp_path):
    (tmp_path / precompiled.MANIFEST).write_text("not json")
    package = precompiled.open_package(tmp_path, torch.device("cpu"), None)
    assert not package.applies and "cannot be read" in package.mismatch
    from lite.engines.torch import _package

    with pytest.raises(FileNotFoundError, match="no manifest.json there; write a package with lite compile"):
        _package(str(tmp_path / "nowhere"), None, "cuda")


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.gpu
def test_background_upgrade_on_cuda_replays_the_fast_configuration_from_a_cuda_graph(tmp_path):
    model, feeds = conv_model()
    engine = TorchEngine(model, device="cuda", mode="default", cache_dir=tmp_path, precision="fp32")
    assert engine.startup == "background"
    name, value = next(iter(feeds.items()))
    x = torch.from_numpy(value).cuda()
    expected = NumpyEngine(model).run(feeds)["out0"]
    first = engine.run({name: x})["out0"]
    assert runner_of(engine).graph_declined is None
    np.testing.assert_allclose(first.cpu().numpy(), expected, rtol=1e-3, atol=1e-4)
    assert engine.wait_until_best(timeout=300)
    assert list(engine.startup_state()["shapes"].values()) == ["best"]
    np.testing.assert_allclose(engine.run({name: x})["out0"].cpu().numpy(), expected, rtol=1e-3, atol=1e-4)


@cuda
@pytest.mark.gpu
def test_lite_compile_times_both_modes_per_batch_size_and_loading_uses_the_winners(tmp_path, capsys):
    from lite import cli
    from lite.model import Model
    from tests.lite.engines.models import cnn

    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn())
    cache = tmp_path / "cache"
    assert cli.main(["compile", str(path), "--batch-sizes", "1", "4", "--cache-dir", str(cache)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["modes"]) == ["[1, 3, 16, 16]", "[4, 3, 16, 16]"]
    for choice in report["modes"].values():
        assert choice["mode"] in AUTO_CANDIDATES and set(choice["ms_per_call"]) == set(AUTO_CANDIDATES)
        assert choice["mode"] == min(choice["ms_per_call"], key=choice["ms_per_call"].get)
    manifest = json.loads((tmp_path / "cnn.lite.compiled" / precompiled.MANIFEST).read_text())
    assert manifest["settings"]["mode"] == "auto" and len(manifest["artifacts"]) == 2 == len(manifest["choices"])

    # A fresh cache: the package alone serves both sizes, each in the mode timed fastest.
    model = Model.load(path, engine="torch", device="cuda", cache_dir=tmp_path / "deploy", startup="fast")
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    expected = NumpyEngine(model.engine.model).run({"x": x})["probabilities"]
    for batch in (1, 4):
        got = model.predict({"x": x[:batch]})["probabilities"]
        np.testing.assert_allclose(got, expected[:batch], rtol=1e-3, atol=1e-4)
    state = model.engine.startup_state()
    assert set(state["shapes"].values()) == {"best"} and state["precompiled"]["artifacts_used"] == 2
    assert state["modes"] == {shape: choice["mode"] for shape, choice in report["modes"].items()}
