"""ONNX Runtime sessions on the process's shared thread pool (lite.engines.ort.thread_pools.share_threads)
instead of a pool of their own each. The pool is the process's, created once: the tests that create it
run in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import lite
from tests.lite.engines.models import cnn

ort = pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")

from lite.engines.ort import thread_choice, thread_pools  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SHARED_POOL = hasattr(ort, "set_global_thread_pool_sizes")
needs_shared_pool = pytest.mark.skipif(not SHARED_POOL, reason="onnxruntime before 1.23 has no shared pool in Python")


def run_script(source: str) -> str:
    """``source`` run in a fresh interpreter: the shared pool is the process's, created once."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                            env=environment, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_shared_pool
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_sessions_built_after_share_threads_add_no_threads_and_compute_the_same():
    output = run_script("""
        import os
        import numpy as np
        import lite
        from lite.engines.ort.thread_pools import share_threads
        from tests.lite.engines.models import cnn

        def threads():
            return len(os.listdir("/proc/self/task"))

        x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
        expected = lite.Model.load(cnn(), device="numpy")(x)
        before = threads()
        own = [lite.Model.load(cnn(), device="cpu", threads=2, cache_dir=None) for _ in range(8)]
        after_own = threads()
        share_threads(2)
        shared = [lite.Model.load(cnn(), device="cpu", threads=4, cache_dir=None) for _ in range(8)]
        after_shared = threads()
        for model in own + shared:  # the sessions built before keep their own pools, and run
            np.testing.assert_allclose(model(x), expected, rtol=1e-4, atol=1e-5)
        options = shared[0].engine.segments[0].runner.session.get_session_options()
        print(after_own - before, after_shared - after_own, options.use_per_session_threads)
    """)
    own, shared, per_session = output.split()
    assert int(own) >= 8  # a worker each (the caller is the pool's other thread)
    assert int(shared) <= 1  # the shared pool's one worker, once
    assert per_session == "False"


@needs_shared_pool
def test_the_shared_pool_has_one_size():
    output = run_script("""
        from lite.engines.ort.thread_pools import ThreadPoolError, share_threads, shared_threads

        share_threads(2)
        share_threads(2)
        try:
            share_threads(3)
        except ThreadPoolError as err:
            print(shared_threads(), isinstance(err, RuntimeError))
            print(err)
    """)
    sizes, message = output.split("\n", 1)
    assert sizes.split() == ["2", "True"]
    assert "has 2 intra-op threads and cannot be resized to 3 intra-op threads" in message


@needs_shared_pool
def test_a_shared_pool_made_outside_lite_is_named_and_then_used():
    output = run_script("""
        import onnxruntime
        import lite
        from lite.engines.ort.thread_pools import ThreadPoolError, share_threads, shared_threads
        from tests.lite.engines.models import cnn

        onnxruntime.set_global_thread_pool_sizes(1, 1)
        try:
            lite.Model.load(cnn(), device="auto", cache_dir=None)
        except ThreadPoolError as err:
            print("refused:", err)
        share_threads(4)
        model = lite.Model.load(cnn(), device="auto", cache_dir=None)
        print("loaded:", model.device, shared_threads())
    """)
    # ONNX Runtime prints its own retry of the refused session on stdout: keep this script's lines.
    refusal, loaded = (line for line in output.splitlines() if line.startswith(("refused:", "loaded:")))
    assert "set_global_thread_pool_sizes" in refusal and "share_threads()" in refusal
    assert loaded == "loaded: cpu outside lite"


def test_share_threads_needs_onnxruntime_1_23(monkeypatch):
    class Options:  # ONNX Runtime 1.20's SessionOptions has no use_per_session_threads
        pass

    old = SimpleNamespace(__version__="1.20.1", SessionOptions=Options)
    monkeypatch.setattr(thread_pools, "_onnxruntime", lambda: old)
    with pytest.raises(lite.EngineUnavailableError, match=r"ONNX Runtime 1\.20\.1 .*onnxruntime>=1\.23"):
        thread_pools.share_threads(2)
    assert not thread_pools.sharing()


@pytest.mark.parametrize("threads", [0, -2, 1.5])
def test_share_threads_takes_a_positive_count(threads):
    with pytest.raises(ValueError, match="threads must be a positive integer or None"):
        thread_pools.share_threads(threads)
    assert not thread_pools.sharing()


def test_the_thread_choice_leaves_shared_sessions_alone(monkeypatch):
    # The shared pool's size is the process's: no pools of other sizes are timed against it (ONNX
    # Runtime would refuse to build them).
    engine = lite.Model.load(cnn(), device="cpu", cache_dir=None).engine
    monkeypatch.setattr(thread_choice, "usable_cores", lambda: 16)
    assert thread_choice.counts(engine) == (2, 4)
    monkeypatch.setattr(thread_pools, "sharing", lambda: True)
    assert thread_choice.counts(engine) == ()


@needs_shared_pool
def test_the_converter_verifies_on_the_shared_pool(tmp_path):
    # Its reference session would otherwise ask for a pool of its own, which ONNX Runtime refuses.
    output = run_script(f"""
        import onnx
        from onnx import TensorProto, helper
        import converter
        from lite.engines.ort.thread_pools import share_threads

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {str(tmp_path / "relu.onnx")!r})
        share_threads(2)
        report = converter.convert({str(tmp_path / "relu.onnx")!r}, {str(tmp_path / "relu.lite")!r}, verify=True)
        print("verification:", report.verification.status)
    """)
    assert "verification: passed" in output
