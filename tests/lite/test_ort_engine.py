"""The ONNX Runtime engine: lowering, agreement with the numpy engine, session cache, partitioning."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes

ort = pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
onnx = pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")

ACTIVATIONS = [("Relu", []), ("Clip", [0.0, 6.0]), ("LeakyRelu", [0.1]), ("HardSigmoid", [0.2, 0.5]),
               ("HardSwish", []), ("Silu", []), ("Sigmoid", []), ("Tanh", [])]


def cnn(activation: str, params: list[float]) -> bytes:
    rng = np.random.default_rng(0)
    b = GraphBuilder("cnn", opset=17)
    x = b.input("x", np.float32, ["N", 3, 16, 16])
    attrs = {"fused_activation": activation}
    if params:
        attrs["fused_activation_params"] = params
    y = b.node("Conv", [x, b.constant("w1", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
                        b.constant("b1", rng.standard_normal(8).astype(np.float32))], pads=[1, 1, 1, 1], **attrs)
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y])
    y = b.node("Gemm", [y, b.constant("w2", rng.standard_normal((4, 8)).astype(np.float32))], transB=1, **attrs)
    y = b.node("Softmax", [y], outputs=["probabilities"], axis=-1)
    b.output(y, np.float32, ["N", 4])
    return to_bytes(b.build())


@pytest.mark.parametrize("activation, params", ACTIVATIONS)
def test_fused_activations_agree_with_the_numpy_engine(activation, params):
    data = cnn(activation, params)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    reference = lite.Model.load(data, device="numpy")(x)
    model = lite.Model.load(data, device="cpu", cache_dir=None)
    assert model.device == "cpu"
    np.testing.assert_allclose(model(x), reference, rtol=1e-5, atol=1e-6)


def test_auto_picks_onnx_runtime_when_installed():
    assert lite.Model.load(cnn("Relu", []), cache_dir=None).device in ("cpu", "cuda")


def test_second_load_uses_the_session_cache(tmp_path):
    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn("Relu", []))
    first = lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache")
    second = lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache")
    assert not first.engine.segments[0].runner.cached
    assert second.engine.segments[0].runner.cached
    x = np.ones((1, 3, 16, 16), np.float32)
    np.testing.assert_array_equal(first(x), second(x))
    # A changed file is a different cache entry.
    path.write_bytes(cnn("Clip", [0.0, 6.0]))
    assert not lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache").engine.segments[0].runner.cached


def test_damaged_cache_entry_is_rebuilt(tmp_path):
    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn("Relu", []))
    lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache")
    for entry in (tmp_path / "cache" / "ort").iterdir():
        (entry / "model.onnx").write_bytes(b"not a model")
    model = lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache")
    assert not model.engine.segments[0].runner.cached
    assert model(np.ones((1, 3, 16, 16), np.float32)).shape == (1, 4)


def partitioned_model() -> bytes:
    """Gemm -> custom op (numpy) -> Gemm -> Cast int64 -> Relu (ORT has no int64 Relu) -> Cast."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("mixed", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    h = b.node("Gemm", [x, b.constant("w1", rng.standard_normal((4, 4)).astype(np.float32))])
    h = b.node("Scale", [h], domain="com.example", factor=3.0)
    h = b.node("Gemm", [h, b.constant("w2", rng.standard_normal((4, 4)).astype(np.float32))])
    h = b.node("Cast", [h], to=7)
    h = b.node("Relu", [h])
    y = b.node("Cast", [h], outputs=["y"], to=1)
    b.output(y, np.float32, ["N", 4])
    model = b.build()
    model.opset_imports["com.example"] = 1
    return to_bytes(model)


def test_partitioning_runs_unsupported_nodes_on_numpy():
    ops = lite.CustomOps()

    @ops.python("Scale", domain="com.example")
    def scale(x, *, factor=1.0):
        return x * np.float32(factor)

    data = partitioned_model()
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32) * 4
    reference = lite.Model.load(data, device="numpy", custom_ops=ops)(x)
    model = lite.Model.load(data, device="cpu", custom_ops=ops, cache_dir=None)
    # The custom op is known to need numpy at load; the segment after it is typed from its first
    # input, and only then does ONNX Runtime report that it has no int64 Relu.
    assert [s["engine"] for s in model.engine.describe()] == ["onnxruntime", "numpy", "onnxruntime"]
    np.testing.assert_array_equal(model(x), reference)
    engines = [segment["engine"] for segment in model.engine.describe()]
    assert engines == ["onnxruntime", "numpy", "onnxruntime", "numpy", "onnxruntime"]
    assert model.engine.numpy_nodes == 2
    np.testing.assert_array_equal(model(x), reference)


def test_unavailable_device_names_what_to_install():
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA")
    with pytest.raises(lite.EngineUnavailableError, match=r"device 'cuda' needs CUDAExecutionProvider.*lite-toolchain\[gpu\]"):
        lite.Model.load(cnn("Relu", []), device="cuda")


def test_unknown_engine_option_is_a_type_error():
    with pytest.raises(TypeError, match="valid options: optimization, device_id"):
        lite.Model.load(cnn("Relu", []), device="cpu", turbo=True)
    with pytest.raises(TypeError, match="apply to ONNX Runtime devices"):
        lite.Model.load(cnn("Relu", []), device="numpy", optimization="all")


def test_lowered_model_passes_the_onnx_checker():
    from lite.format import load
    from lite.format.onnx.lower import lower_model

    lowered = lower_model(load(cnn("Clip", [0.0, 6.0])), external_weights=False)
    onnx.checker.check_model(lowered.model, full_check=True)
    assert lowered.model.ir_version <= 11
    assert all(o.version <= 26 for o in lowered.model.opset_import if o.domain in ("", "ai.onnx"))
    assert [n.op_type for n in lowered.model.graph.node][:2] == ["Conv", "Clip"]
    bounds = {t.name: onnx.numpy_helper.to_array(t) for t in lowered.model.graph.initializer if "Clip" in t.name}
    assert sorted({float(v) for v in bounds.values()}) == [0.0, 6.0]  # Conv's and Gemm's Clip


def test_threads_option(tmp_path):
    model = lite.Model.load(cnn("Relu", []), device="cpu", threads=1, cache_dir=None)
    assert model(np.ones((1, 3, 16, 16), np.float32)).shape == (1, 4)


def _spinning_entries(model) -> tuple[str, str]:
    options = model.engine.segments[0].runner.session.get_session_options()
    return (options.get_session_config_entry("session.intra_op.allow_spinning"),
            options.get_session_config_entry("session.force_spinning_stop"))


def test_threads_spin_only_while_a_run_is_in_progress_by_default():
    # ONNX Runtime's default keeps the threads spinning after a run, taking the cores from the
    # next model's run (or the Python code between calls) in the same process.
    model = lite.Model.load(cnn("Relu", []), device="cpu", cache_dir=None)
    assert _spinning_entries(model) == ("1", "1")
    assert model(np.ones((1, 3, 16, 16), np.float32)).shape == (1, 4)


@pytest.mark.parametrize(("spinning", "entries"), [("always", ("1", "0")), ("never", ("0", "1"))])
def test_spinning_option_reaches_the_session(spinning, entries):
    model = lite.Model.load(cnn("Relu", []), device="cpu", cache_dir=None, spinning=spinning)
    assert _spinning_entries(model) == entries


def test_unknown_spinning_value_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="spinning must be one of run, always, never; got 'sometimes'"):
        lite.Model.load(cnn("Relu", []), device="cpu", cache_dir=None, spinning="sometimes")


def test_warm_start_from_the_cache_does_not_import_onnx(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "cnn.lite"
    path.write_bytes(cnn("Relu", []))
    lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache")  # fills the cache
    code = ("import sys, numpy as np, lite\n"
            f"m = lite.Model.load({str(path)!r}, device='cpu', cache_dir={str(tmp_path / 'cache')!r})\n"
            "m(np.ones((1, 3, 16, 16), np.float32))\n"
            "print(m.engine.segments[0].runner.cached, 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_cuda_provider_options_defaults_and_pass_through():
    from lite.engines.ort.sessions import SessionConfig, providers

    ort = pytest.importorskip("onnxruntime")
    cuda = dict(providers(SessionConfig(device="cuda"))[0][1])
    assert cuda["prefer_nhwc"] == "1" and cuda["enable_cuda_graph"] == "1"
    newer = tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 20)
    assert (cuda.get("fuse_conv_bias") == "1") == newer
    assert "use_tf32" not in cuda  # ONNX Runtime's default unless the engine or the caller says
    no_tf32 = dict(providers(SessionConfig(device="cuda", tf32=False))[0][1])
    assert (no_tf32.get("use_tf32") == "0") == newer
    off = dict(providers(SessionConfig(device="cuda", fuse_conv_bias=False))[0][1])
    assert "fuse_conv_bias" not in off
    extra = SessionConfig(device="cuda", cuda_options={"use_tf32": 1})
    assert extra.cuda_options == (("use_tf32", "1"),) and hash(extra)  # frozen and hashable
    assert dict(providers(extra)[0][1])["use_tf32"] == "1"  # the caller's options win
    assert providers(SessionConfig()) == ["CPUExecutionProvider"]


def test_a_cuda_session_that_fell_back_to_the_cpu_is_refused():
    """ONNX Runtime runs on the CPU when its CUDA provider does not start (an unknown option, a
    missing library): lite refuses that instead of running slowly."""
    from lite.engines.ort.sessions import SessionConfig, _check_provider

    class FellBack:
        def get_providers(self):
            return ["CPUExecutionProvider"]

    with pytest.raises(lite.EngineUnavailableError, match="fell back to the CPU"):
        _check_provider(FellBack(), SessionConfig(device="cuda"))
    _check_provider(FellBack(), SessionConfig(device="cpu"))


def test_without_onnx_the_onnx_runtime_engine_is_unavailable_and_auto_runs_numpy(monkeypatch):
    """lite's ONNX Runtime engine writes ONNX with the onnx package: without it, device='cpu' is a
    typed refusal naming the extra (it used to be a ModuleNotFoundError at the first cold load),
    and device='auto' falls back to the numpy engine."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else real(name, *a))
    with pytest.raises(lite.EngineUnavailableError, match=r"onnx.*lite-toolchain\[ort\]"):
        lite.Model.load(cnn("Relu", []), device="cpu", cache_dir=None)
    assert lite.Model.load(cnn("Relu", [])).device == "numpy"


def test_a_cache_folder_that_cannot_be_written_builds_sessions_uncached(tmp_path):
    # No writable HOME (a read-only root on an edge device): the load failed with NotADirectoryError.
    import warnings

    from lite.engines.ort import sessions

    sessions._warn_uncached.cache_clear()
    blocker = tmp_path / "a file, not a folder"
    blocker.write_text("")
    model_path = tmp_path / "m.lite"
    model_path.write_bytes(cnn("Relu", []))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = lite.Model.load(model_path, device="cpu", cache_dir=blocker / "cache")
    assert any("sessions are not cached" in str(w.message) for w in caught)
    assert not model.engine.segments[0].runner.cached
    assert model(np.ones((1, 3, 16, 16), np.float32)).shape[0] == 1


def test_auto_says_when_onnx_runtime_refuses_a_model_and_the_reason_survives(monkeypatch):
    """An ONNX Runtime too old for the lowered model (its IR version) refused it and device='auto'
    ran the numpy engine without a word; the reason, at the end of ONNX Runtime's long first line,
    was cut off after 300 characters."""
    import onnxruntime as ort

    reason = "Unsupported model IR version: 11, max supported IR version: 10"
    signature = "onnxruntime::Model::Model(ModelProto&&, const PathString&, " * 8

    def refuse(*args, **kwargs):
        raise RuntimeError(f"[ONNXRuntimeError] : 1 : FAIL : Load model failed:model.cc:181 {signature}) {reason}")

    monkeypatch.setattr(ort, "InferenceSession", refuse)
    with pytest.warns(lite.errors.EngineFallbackWarning, match=r"numpy engine: .*IR version: 11, max supported IR"):
        model = lite.Model.load(cnn("Relu", []), cache_dir=None)
    assert model.device == "numpy"


def test_the_lowered_model_asks_for_the_ir_version_its_opsets_need():
    """Stamped IR 11 always, an opset-17 model was refused by ONNX Runtime 1.20 to 1.22 (IR 10)."""
    import onnx

    from lite.format import load
    from lite.format.onnx.lower import lower_nodes

    model = load(cnn("Relu", []))
    model.opset_imports[""] = 17
    nodes = model.main.nodes
    lowered = lower_nodes(model, nodes, model.main.inputs, model.main.outputs)
    assert lowered.model.ir_version == 8
    onnx.checker.check_model(lowered.model)


def test_repeated_node_names_load_on_onnx_runtime():
    """ONNX allows two nodes of one name (files of earlier converters, models of other tools), ONNX
    Runtime refuses them: lowering renames repeats, in subgraphs too."""
    b = GraphBuilder("dup", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    y = b.node("Relu", [x], name="same")
    y = b.node("Neg", [y], name="same", outputs=["y"])
    b.output(y, np.float32, ["N", 4])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    got = lite.Model.load(to_bytes(b.build()), device="cpu", cache_dir=None).predict({"x": x})["y"]
    np.testing.assert_array_equal(got, -np.maximum(x, 0))


EMPTY_RECURRENT = """
import numpy as np, lite
from lite.format import GraphBuilder, to_bytes
rng = np.random.default_rng(0)
for op, gates in (("LSTM", 4), ("GRU", 3)):
    b = GraphBuilder("rnn", opset=17)
    x = b.input("x", np.float32, ["T", "N", 4])
    w = b.constant("w", rng.standard_normal((1, gates * 5, 4)).astype(np.float32))
    r = b.constant("r", rng.standard_normal((1, gates * 5, 5)).astype(np.float32))
    outputs = b.node(op, [x, w, r], hidden_size=5, outputs=["y", "h"] + (["c"] if op == "LSTM" else []))
    b.output(outputs[0], np.float32, ["T", 1, "N", 5])
    b.output(outputs[1], np.float32, [1, "N", 5])
    model = lite.Model.load(to_bytes(b.build()), device="cpu", cache_dir=None)
    for shape in ((3, 0, 4), (0, 2, 4)):
        got = model.predict({"x": np.zeros(shape, np.float32)})
        print(op, shape, got["y"].shape, got["h"].shape, float(np.abs(got["h"]).max(initial=0)))
"""


def test_an_empty_batch_or_sequence_on_a_recurrent_model_answers_instead_of_ending_the_process():
    """ONNX Runtime's LSTM and GRU kernels end the process (std::terminate) on a batch of 0 or 0
    time steps; such calls run on the numpy engine (in a subprocess here: the failure is an abort)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", EMPTY_RECURRENT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:4] == [
        "LSTM (3, 0, 4) (3, 1, 0, 5) (1, 0, 5) 0.0", "LSTM (0, 2, 4) (0, 1, 2, 5) (1, 2, 5) 0.0",
        "GRU (3, 0, 4) (3, 1, 0, 5) (1, 0, 5) 0.0", "GRU (0, 2, 4) (0, 1, 2, 5) (1, 2, 5) 0.0"]
