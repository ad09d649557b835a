"""The torch engine's compilation: torch.compile's on-disk caches, and ahead-of-time artifacts
(aot=True: compiled once, loaded by later processes, damaged or unsaveable ones handled), on the
CPU with one-node models (compilation is CPU-heavy)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from tests.lite.engines.models import Const, one_node

torch = pytest.importorskip("torch", reason="the torch engine needs PyTorch (the torch extra)")

from lite.engines.torch import TorchEngine

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.slow
def test_compiled_model_caches_on_disk(tmp_path, monkeypatch):
    """torch.compile on the CPU (a tiny model: compilation is CPU-heavy), cache under lite's root."""
    from torch._dynamo.utils import counters

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    model, feeds = one_node("Conv", [f32(1, 3, 6, 6), Const(f32(2, 3, 3, 3))], pads=[1, 1, 1, 1],
                            fused_activation="Relu")
    engine = TorchEngine(model, device="cpu", mode="default", cache_dir=tmp_path)
    expected = NumpyEngine(model).run(feeds)["out0"]
    np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert engine.cache_dir is not None
    if engine.cache_dir.is_relative_to(tmp_path):
        assert any(engine.cache_dir.rglob("*")), "Inductor wrote nothing to the cache"
    # A new engine (as after a restart) hits the FX graph cache instead of recompiling.
    torch._dynamo.reset()
    counters.clear()
    again = TorchEngine(model, device="cpu", mode="default", cache_dir=tmp_path)
    np.testing.assert_allclose(again.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert counters["inductor"]["fxgraph_cache_hit"] >= 1


@pytest.mark.slow
def test_aot_artifacts_are_compiled_once_and_loaded_by_a_new_process(tmp_path, monkeypatch):
    """aot=True: one compiled artifact (a folder) per input shape under <cache>/torch/compiled,
    holding code only (the weights are lifted to inputs, so another model of the same shapes has
    the same key); a new process, with every compiler made to fail, loads it and gets the same
    answers."""
    import subprocess
    import sys

    from lite.format import save

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # an earlier engine set it process-wide
    model, feeds = one_node("Conv", [f32(2, 3, 6, 6), Const(f32(64, 3, 3, 3))], pads=[1, 1, 1, 1],
                            fused_activation="Relu")
    expected = NumpyEngine(model).run(feeds)["out0"]
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path)
    np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert engine.cache_dir == tmp_path / "torch"
    [artifact] = (tmp_path / "torch" / "compiled").iterdir()
    assert artifact.is_dir() and not artifact.name.startswith(".")
    runner = next(s.runner for s in engine.segments if s.on_torch)
    assert runner.aot_declined is None and not runner.reloaded
    path = tmp_path / "model.lite"
    save(model, str(path))
    np.save(tmp_path / "x.npy", feeds["in0"])
    script = (
        "import sys, numpy as np, torch, torch._inductor\n"
        "def refuse(*a, **k): raise AssertionError('compiled again instead of loading the artifact')\n"
        "torch._inductor.standalone_compile = refuse\n"
        "torch.compile = refuse\n"
        "import lite\n"
        "model = lite.Model.load(sys.argv[1], engine='torch', device='cpu', mode='default', aot=True,"
        " cache_dir=sys.argv[2])\n"
        "np.save(sys.argv[3], model.predict({'in0': np.load(sys.argv[4])})['out0'])\n"
        "runner = next(s.runner for s in model.engine.segments if s.on_torch)\n"
        "assert runner.aot_declined is None and not runner.reloaded, (runner.aot_declined, runner.reloaded)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path), str(tmp_path / "y.npy"),
                    str(tmp_path / "x.npy")], check=True, timeout=300)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)
    other, _ = one_node("Conv", [f32(2, 3, 6, 6), Const(f32(64, 3, 3, 3))], pads=[1, 1, 1, 1],
                        fused_activation="Relu")
    assert next(s.runner for s in TorchEngine(other, device="cpu", mode="default", aot=True, cache_dir=tmp_path)
                .segments if s.on_torch).key(tuple(torch.from_numpy(v) for v in feeds.values())) == artifact.name
    with pytest.raises(ValueError, match="aot=True"):
        TorchEngine(model, device="cpu", mode="eager", aot=True, cache_dir=None)
    # Without a cache folder the artifact runs from memory: lite writes nothing.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    bare = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=None)
    np.testing.assert_allclose(bare.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    runner = next(s.runner for s in bare.segments if s.on_torch)
    assert runner.folder is None and runner.aot_declined is None


@pytest.mark.slow
def test_a_damaged_artifact_is_compiled_again_and_a_failing_compiler_falls_back(tmp_path, monkeypatch, caplog):
    """A compiled artifact in the cache that does not load is compiled again and replaced (said
    once in the log); when compiling itself fails, the engine says why, once, and runs through
    torch.compile with the same answers."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    model, feeds = one_node("Conv", [f32(2, 3, 6, 6), Const(f32(4, 3, 3, 3))], pads=[1, 1, 1, 1])
    expected = NumpyEngine(model).run(feeds)["out0"]
    TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path).run(feeds)
    [artifact] = (tmp_path / "torch" / "compiled").iterdir()
    for entry in (artifact / "aotautograd").iterdir():  # damaged on disk
        shutil.rmtree(entry)
        entry.write_bytes(b"\x80\x04 not an artifact")

    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path)
    with caplog.at_level("WARNING", logger="lite.engines.torch"):
        np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    runner = next(s.runner for s in engine.segments if s.on_torch)
    assert runner.aot_declined is None and len(runner.reloaded) == 1 and artifact.name in runner.reloaded[0]
    assert (artifact / "aotautograd").is_dir() and all(e.is_dir() for e in (artifact / "aotautograd").iterdir())
    assert sum("does not load, compiling it again" in r.getMessage() for r in caplog.records) == 1

    def refuse(*args, **kwargs):
        raise RuntimeError("no compiler here")

    shutil.rmtree(artifact)
    monkeypatch.setattr(torch._inductor, "standalone_compile", refuse)
    caplog.clear()
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path)
    with caplog.at_level("WARNING", logger="lite.engines.torch"):
        for _ in range(2):
            np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    runner = next(s.runner for s in engine.segments if s.on_torch)
    assert runner.aot_declined == "standalone_compile failed: RuntimeError: no compiler here"
    assert [r.getMessage() for r in caplog.records].count(
        f"ahead-of-time compilation declined, running through torch.compile instead: {runner.aot_declined}") == 1


@pytest.mark.slow
def test_an_artifact_that_cannot_be_saved_still_runs(tmp_path, monkeypatch, caplog):
    """Saving is a cache, not a requirement: an artifact Inductor cannot serialize (or a full,
    read-only cache) is said once in the log, runs from memory, and leaves no half-written folder."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    model, feeds = one_node("Conv", [f32(2, 3, 6, 6), Const(f32(4, 3, 3, 3))], pads=[1, 1, 1, 1])
    expected = NumpyEngine(model).run(feeds)["out0"]
    real = torch._inductor.standalone_compile

    class Unsaveable:
        def __init__(self, artifact):
            self.artifact = artifact

        def __call__(self, *args):
            return self.artifact(*args)

        def save(self, *, path, format):
            Path(path).mkdir()
            (Path(path) / "partial").write_bytes(b"half")
            raise RuntimeError("cannot serialize this graph")

    monkeypatch.setattr(torch._inductor, "standalone_compile", lambda *a, **k: Unsaveable(real(*a, **k)))
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path)
    with caplog.at_level("WARNING", logger="lite.engines.torch"):
        for _ in range(2):
            np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert list((tmp_path / "torch" / "compiled").iterdir()) == []
    [message] = [r.getMessage() for r in caplog.records]
    assert "could not save the compiled artifact" in message and "cannot serialize this graph" in message
    assert next(s.runner for s in engine.segments if s.on_torch).aot_declined is None


def test_cache_dir_wins_over_torchs_own_default_but_not_over_a_users_variable(tmp_path, monkeypatch):
    """torch writes its default folder into TORCHINDUCTOR_CACHE_DIR once Inductor has run; an
    engine's cache_dir replaces that, but never a folder the user chose."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from lite.engines.torch.inductor_cache import CACHE_VARIABLE, configure_cache

    monkeypatch.setenv(CACHE_VARIABLE, default_cache_dir())
    assert configure_cache(tmp_path / "lite") == tmp_path / "lite" / "torch"
    assert os.environ[CACHE_VARIABLE] == str(tmp_path / "lite" / "torch")
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "mine"))
    assert configure_cache(tmp_path / "lite") == tmp_path / "mine"
    monkeypatch.delenv(CACHE_VARIABLE)
    assert configure_cache(None) is None


def test_each_engine_keeps_its_artifacts_in_its_own_cache_dir(tmp_path, monkeypatch):
    """Inductor reads one cache folder per process (the first engine's, or the user's variable);
    a later engine given another cache_dir still keeps its compiled artifacts there (a server
    whose second model named its own folder found its artifacts in the first model's)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "first"))
    model, _ = one_node("Relu", [f32(1, 4)])
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path / "second")
    assert engine.cache_dir == tmp_path / "second" / "torch"
    assert next(s.runner for s in engine.segments if s.on_torch).folder == tmp_path / "second" / "torch"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "first")


def test_aot_is_the_default_on_cuda_only_and_inductor_options_are_checked():
    """Ahead of time on CUDA (faster at batch 1 and on a restart), torch.compile on the CPU
    (freezing prepacks weights for oneDNN); a setting Inductor does not have is refused by name."""
    model, _ = one_node("Relu", [f32(2, 3)])
    assert TorchEngine(model, device="cpu", cache_dir=None).aot is False
    assert TorchEngine(model, device="cpu", cache_dir=None, aot=True).aot is True
    with pytest.raises(ValueError, match="inductor_options: no_such_setting not setting"):
        TorchEngine(model, device="cpu", cache_dir=None, inductor_options={"no_such_setting": 1})
    with pytest.raises(TypeError, match="inductor_options must be a dict"):
        TorchEngine(model, device="cpu", cache_dir=None, inductor_options=[("fallback_random", True)])


@pytest.mark.slow
def test_inductor_options_reach_both_compilers_and_the_artifact_key(tmp_path, monkeypatch):
    """Artifacts compile without coordinate-descent tuning (a kernel loaded from one would tune
    again in every process) unless inductor_options turn it on; a user's settings apply over the
    mode's, enter the artifact's key (two settings, two artifacts), and reach torch.compile too."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    model, feeds = one_node("Conv", [f32(1, 3, 6, 6), Const(f32(2, 3, 3, 3))], pads=[1, 1, 1, 1])
    expected = NumpyEngine(model).run(feeds)["out0"]
    engines = [TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path),
               TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path,
                           inductor_options={"coordinate_descent_tuning": True, "fallback_random": True}),
               TorchEngine(model, device="cpu", mode="default", cache_dir=tmp_path,
                           inductor_options={"fallback_random": True})]
    runners = [next(s.runner for s in engine.segments if s.on_torch) for engine in engines]
    assert runners[0].options["coordinate_descent_tuning"] is False
    assert runners[1].options["coordinate_descent_tuning"] is True and runners[1].options["fallback_random"] is True
    for engine in engines:
        np.testing.assert_allclose(engine.run(feeds)["out0"], expected, rtol=1e-4, atol=1e-5)
    assert runners[0].aot_declined is None and runners[1].aot_declined is None
    assert len([p for p in (tmp_path / "torch" / "compiled").iterdir() if not p.name.startswith(".")]) == 2


@pytest.mark.slow
def test_shapes_past_the_compile_limit_run_uncompiled(tmp_path, monkeypatch, caplog):
    """As torch.compile does past its recompile limit: a new input shape beyond the limit runs the
    module uncompiled (correctly), said once in the log, instead of compiling for minutes each."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    # torch's own patching: monkeypatch's undo deletes a config entry it does not find in the
    # module's __dict__, and every later compile in the process then failed reading it.
    with torch._dynamo.config.patch(recompile_limit=1):
        _run_past_the_limit(tmp_path, caplog)


def _run_past_the_limit(tmp_path, caplog):
    model, feeds = one_node("Relu", [f32(2, 3)])
    engine = TorchEngine(model, device="cpu", mode="default", aot=True, cache_dir=tmp_path)
    runner = next(s.runner for s in engine.segments if s.on_torch)
    with caplog.at_level("WARNING", logger="lite.engines.torch"):
        for rows in (2, 3, 4, 3):
            x = f32(rows, 3)
            np.testing.assert_array_equal(engine.run({"in0": x})["out0"], np.maximum(x, 0))
    assert len(runner.runners) == 3 and runner.uncompiled == [[(3, 3)], [(4, 3)]]
    assert len(list((tmp_path / "torch" / "compiled").iterdir())) == 1
    [message] = [r.getMessage() for r in caplog.records]
    assert "more than 1 input shapes" in message
