"""int8 models on ONNX Runtime's CPU provider: the float form, and the choice between it and int8 kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes

ort = pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
onnx = pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")

from onnx.reference import ReferenceEvaluator

from lite.engines import EngineRequest, create_engine
from lite.engines.ort.dequantized import float_form
from lite.format import load
from lite.format.onnx.lower import lower_model


def _pair(b: GraphBuilder, x: str, name: str, scale: float, zero: int) -> str:
    """QuantizeLinear → DequantizeLinear of ``x`` with uint8 parameters."""
    s, z = b.constant(f"{name}_scale", np.float32(scale)), b.constant(f"{name}_zero", np.uint8(zero))
    return b.node("DequantizeLinear", [b.node("QuantizeLinear", [x, s, z]), s, z])


def _weights(b: GraphBuilder, name: str, values: np.ndarray) -> str:
    """int8 weights per output channel, read through DequantizeLinear."""
    scale = np.abs(values).reshape(len(values), -1).max(axis=1) / 127
    quantized = np.round(values / scale.reshape(-1, *[1] * (values.ndim - 1))).astype(np.int8)
    return b.node("DequantizeLinear", [b.constant(f"{name}_q", quantized), b.constant(f"{name}_s", scale.astype(np.float32)),
                                       b.constant(f"{name}_z", np.zeros(len(values), np.int8))], axis=0)


def _residual(relu_left_to_the_pair: bool = True, zero: int = 0, relu_before: bool = False,
              quantized_by_lite: bool = True) -> bytes:
    """x → Conv → (+x) → pair: the quantizer's form of Conv + Add + Relu with the Relu removed
    (the pair's zero point at 0 clamps), or with a zero point above 0 (no Relu was there); marked
    as lite's converter marks the files it quantizes, or not (a file another tool quantized)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("residual", opset=17)
    x = b.input("x", np.float32, ["N", 4, 6, 6])
    xd = _pair(b, x, "x", 0.05, 128)
    conv = b.node("Conv", [xd, _weights(b, "w", rng.standard_normal((4, 4, 3, 3)).astype(np.float32))], pads=[1, 1, 1, 1])
    if relu_before:
        conv = b.node("Relu", [conv])
    conv = _pair(b, conv, "conv", 0.1, 128)
    added = b.node("Add", [conv, xd])
    y = _pair(b, added, "y", 0.05 if relu_left_to_the_pair else 0.1, zero)
    b.output(b.node("GlobalAveragePool", [y], outputs=["pooled"]), np.float32, ["N", 4, 1, 1])
    model = b.build({"quantization": json.dumps({"mode": "int8"})} if quantized_by_lite else None)
    for tensor in model.main.tensors:
        if not tensor.is_constant and tensor.shape is None and tensor.dtype.name == "FLOAT":
            tensor.shape = ("N", 4, 6, 6)
    return to_bytes(model)


def _feeds(seed: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((2, 4, 6, 6)).astype(np.float32)}


def _float_reference(data: bytes, clamp_at_zero: bool) -> np.ndarray:
    """The model in float32 on the dequantized weights, by hand: no rounding of activations."""
    model = load(data)
    tensors = {t.name: t for t in model.main.tensors}
    w = tensors["w_q"].data.astype(np.float32) * tensors["w_s"].data.reshape(-1, 1, 1, 1)
    x = _feeds()["x"]
    session = ReferenceEvaluator(onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4, 6, 6] x, float[4, 4, 3, 3] w) => (float[N, 4, 6, 6] y) {
            y = Conv <pads = [1, 1, 1, 1]> (x, w)
        }"""))
    y = session.run(None, {"x": x, "w": w})[0] + x
    if clamp_at_zero:
        y = np.maximum(y, 0)
    return y.mean(axis=(2, 3), keepdims=True)


def test_float_form_has_no_quantization_left_and_computes_in_float():
    lowered = float_form(lower_model(load(_residual()), external_weights=False))
    assert not isinstance(lowered, str), lowered
    ops = [node.op_type for node in lowered.model.graph.node]
    assert ops == ["Conv", "Add", "Relu", "GlobalAveragePool"]
    assert all(init.data_type == onnx.TensorProto.FLOAT for init in lowered.model.graph.initializer)
    onnx.checker.check_model(lowered.model, full_check=True)
    got = ReferenceEvaluator(lowered.model).run(None, _feeds())[0]
    np.testing.assert_allclose(got, _float_reference(_residual(), clamp_at_zero=True), rtol=1e-5, atol=1e-6)


def test_a_zero_point_above_the_bottom_clamps_nothing():
    lowered = float_form(lower_model(load(_residual(zero=100)), external_weights=False))
    assert [node.op_type for node in lowered.model.graph.node] == ["Conv", "Add", "GlobalAveragePool"]
    got = ReferenceEvaluator(lowered.model).run(None, _feeds())[0]
    np.testing.assert_allclose(got, _float_reference(_residual(zero=100), clamp_at_zero=False), rtol=1e-5, atol=1e-6)


def test_values_that_cannot_be_negative_get_no_relu():
    b = GraphBuilder("pooled", opset=17)
    x = b.input("x", np.float32, ["N", 4, 6, 6])
    y = _pair(b, b.node("Relu", [x]), "relu", 0.05, 0)
    y = _pair(b, b.node("MaxPool", [y], kernel_shape=[2, 2]), "pool", 0.05, 0)
    b.output(b.node("Mul", [y, y], outputs=["y"]), np.float32, ["N", 4, 5, 5])
    lowered = float_form(lower_model(load(to_bytes(b.build())), external_weights=False))
    assert [node.op_type for node in lowered.model.graph.node] == ["Relu", "MaxPool", "Mul"]


def test_a_rounded_graph_output_keeps_its_name():
    b = GraphBuilder("returned", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    y = b.node("Sigmoid", [_pair(b, x, "x", 0.05, 128)])
    b.output(b.node("DequantizeLinear", [b.node("QuantizeLinear", [y, b.constant("s", np.float32(1 / 255)),
                                                                    b.constant("z", np.uint8(0))]),
                                         "s", "z"], outputs=["y"]), np.float32, ["N", 4])
    lowered = float_form(lower_model(load(to_bytes(b.build())), external_weights=False))
    assert [node.op_type for node in lowered.model.graph.node] == ["Sigmoid", "Identity"]
    assert [value.name for value in lowered.model.graph.output] == ["y"]


def test_integer_layers_of_other_forms_have_no_float_form():
    b = GraphBuilder("dynamic", opset=17)
    x = _pair(b, b.input("x", np.float32, [4, 8]), "x", 0.05, 128)
    quantized = b.node("DynamicQuantizeLinear", [x], outputs=["xq", "xs", "xz"])
    product = b.node("MatMulInteger", [quantized[0], b.constant("w", np.ones((8, 2), np.uint8)), quantized[2]])
    b.output(b.node("Cast", [product], outputs=["y"], to=1), np.float32, [4, 2])
    reason = float_form(lower_model(load(to_bytes(b.build())), external_weights=False))
    assert isinstance(reason, str) and "MatMulInteger" in reason and "not cast to float and scaled" in reason


def test_float_compute_runs_the_float_form():
    data = _residual()
    model = lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="float")
    assert model.engine.decision == {"chosen": "float", "why": "int8_compute='float'"}
    assert model.engine.int8_form == "float form"
    np.testing.assert_allclose(model.predict(_feeds())["pooled"], _float_reference(data, clamp_at_zero=True),
                               rtol=1e-5, atol=1e-6)


def _timed(monkeypatch, ratios):
    """The measurement's rounds as given (float form's time over the int8 kernels')."""
    from lite.engines.ort import int8_choice

    monkeypatch.setattr(int8_choice, "alternate", lambda calls, feeds, rounds, warmup_s, measure_s: (
        {"int8": [1.0] * len(ratios), "float": list(ratios)}))


def test_auto_measures_records_and_reuses_its_decision(tmp_path, monkeypatch):
    _timed(monkeypatch, [0.8, 0.7, 0.9, 0.75, 0.8])
    path = tmp_path / "residual.lite"
    path.write_bytes(_residual())
    first = lite.Model.load(path, cache_dir=tmp_path / "cache")  # device="auto": int8_compute="auto"
    decision = first.engine.decision
    assert decision["chosen"] == "float" and decision["reused"] is False and decision["settled"] is True
    assert set(decision["ms"]) == {"int8", "float"} and decision["float_error"] < 0.5
    records = list((tmp_path / "cache" / "ort" / "int8").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["chosen"] == decision["chosen"]
    second = lite.Model.load(path, cache_dir=tmp_path / "cache")
    assert second.engine.decision["reused"] is True
    assert second.engine.int8_form == first.engine.int8_form
    np.testing.assert_array_equal(second.predict(_feeds())["pooled"], first.predict(_feeds())["pooled"])


def test_a_choice_the_rounds_disagree_on_is_measured_again(tmp_path, monkeypatch):
    # A busy machine: rounds on both sides of 1 with a median near it. This load uses the choice;
    # nothing is kept, so the next load measures again instead of keeping a guess for good.
    _timed(monkeypatch, [1.19, 1.33, 0.88, 1.03, 0.98])
    path = tmp_path / "residual.lite"
    path.write_bytes(_residual())
    first = lite.Model.load(path, cache_dir=tmp_path / "cache")
    assert first.engine.decision["settled"] is False
    assert "not kept" in first.engine.decision["why"]
    assert not list((tmp_path / "cache" / "ort" / "int8").glob("*.json"))
    assert lite.Model.load(path, cache_dir=tmp_path / "cache").engine.decision["reused"] is False


@pytest.mark.parametrize("ratios, expected", [
    ([0.8, 0.9, 0.95], True), ([1.2, 1.01, 1.3], True),  # one side of 1
    ([0.5, 0.6, 1.05, 0.55, 0.58], True),  # an outlier round, the median clearly below 1
    ([1.19, 1.33, 0.88, 1.03, 0.98], False), ([0.95, 1.05, 1.0], False),
])
def test_rounds_settle_a_choice_when_they_agree(ratios, expected):
    from lite.engines.ort import int8_choice

    assert int8_choice.settled(ratios) is expected


def test_int8_kernels_without_a_choice():
    data = _residual()
    assert lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="int8").engine.decision is None
    # The engine's own default (quantization tools evaluate int8 accuracy with it) is the int8 kernels.
    engine = create_engine("onnxruntime", load(data), EngineRequest(device="cpu", cache_dir=None))
    assert engine.decision is None and engine.int8_form == "as stored"
    # Float models have nothing to choose.
    b = GraphBuilder("float", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    b.output(b.node("Relu", [x], outputs=["y"]), np.float32, ["N", 4])
    assert lite.Model.load(to_bytes(b.build()), cache_dir=None).engine.decision is None


def test_a_file_quantized_elsewhere_keeps_its_int8_kernels(tmp_path):
    """A QDQ file lite's converter did not write (ONNX Runtime's quantizer, another tool's) runs as
    its producer ran it: "auto" does not swap in the float form, whose outputs move from those of
    the int8 kernels the file was validated on; "float" still takes it."""
    data = _residual(quantized_by_lite=False)
    engine = lite.Model.load(data, device="cpu", cache_dir=tmp_path / "cache").engine
    assert engine.int8_form == "as stored"
    assert engine.decision["chosen"] == "int8" and engine.decision["why"].startswith("quantized by another tool")
    assert not (tmp_path / "cache" / "ort" / "int8").exists()  # nothing measured, nothing recorded
    floated = lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="float").engine
    assert floated.decision["chosen"] == "float" and floated.int8_form != "as stored"


def test_unknown_int8_compute_is_refused():
    with pytest.raises(ValueError, match="int8_compute must be"):
        lite.Model.load(_residual(), device="cpu", cache_dir=None, int8_compute="fast")


@pytest.mark.parametrize("wrong, chosen", [("int8", "float"), ("float", "int8"), ("both", "int8")])
def test_the_numpy_engine_settles_a_disagreement(wrong, chosen):
    from lite.engines.ort import int8_choice

    right = {"y": np.linspace(-1, 1, 16, dtype=np.float32)}
    zeros = {"y": np.zeros(16, np.float32)}
    int8 = (lambda feeds: zeros) if wrong in ("int8", "both") else (lambda feeds: right)
    floated = (lambda feeds: {"y": -right["y"]}) if wrong in ("float", "both") else (lambda feeds: right)
    decision = int8_choice.measure(int8, floated, {}, reference=lambda: (lambda feeds: right))
    assert decision["chosen"] == chosen and "disagree" in decision["why"]
    assert "ms" not in decision  # a wrong result is not timed


def _dynamic_matmul() -> bytes:
    """int8-dynamic's layer: DynamicQuantizeLinear → MatMulInteger → Cast → Mul(x scale · w scale) → Add(bias)."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("dynamic", opset=17)
    x = b.input("x", np.float32, ["N", 16])
    xq, xs, xz = b.node("DynamicQuantizeLinear", [x], outputs=["xq", "xs", "xz"])
    weights = rng.integers(-127, 128, (16, 8)).astype(np.int8)
    product = b.node("MatMulInteger", [xq, b.constant("w", weights), xz, b.constant("wz", np.zeros(8, np.int8))])
    scale = b.node("Mul", [xs, b.constant("ws", np.linspace(0.01, 0.02, 8).astype(np.float32))])
    y = b.node("Mul", [b.node("Cast", [product], to=1), scale])
    b.output(b.node("Add", [y, b.constant("bias", np.ones(8, np.float32))], outputs=["y"]), np.float32, ["N", 8])
    return to_bytes(b.build())


def test_int8_dynamic_layers_have_a_float_form():
    data = _dynamic_matmul()
    lowered = float_form(lower_model(load(data), external_weights=False))
    assert not isinstance(lowered, str), lowered
    assert [node.op_type for node in lowered.model.graph.node] == ["MatMul", "Add"]
    x = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
    tensors = {t.name: t.data for t in load(data).main.tensors if t.data is not None}
    expected = x @ (tensors["w"].astype(np.float32) * tensors["ws"]) + 1
    np.testing.assert_allclose(ReferenceEvaluator(lowered.model).run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)
    model = lite.Model.load(data, device="cpu", cache_dir=None, int8_compute="float")
    assert model.engine.decision["chosen"] == "float"
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-5)
    # "auto" leaves int8-dynamic models on their int8 kernels (tools compare them with the numpy engine).
    assert lite.Model.load(data, device="cpu", cache_dir=None).engine.decision is None


def test_random_inputs_that_do_not_run_keep_the_int8_kernels(capfd):
    """A symbolic length the model cannot run at as planned (224 samples: a convolution wider than
    that) is not measured, and ONNX Runtime's own logger prints nothing about it."""
    b = GraphBuilder("audio", opset=17)
    x = b.input("x", np.float32, [1, 1, "T"])
    w = b.node("DequantizeLinear", [b.constant("w", np.ones((2, 1, 300), np.int8)), b.constant("s", np.float32(0.1))])
    y = _pair(b, b.node("Conv", [_pair(b, x, "x", 0.05, 128), w]), "y", 0.1, 128)
    b.output(b.node("Identity", [y], outputs=["y"]), np.float32, [1, 2, "T-299"])
    capfd.readouterr()
    model = lite.Model.load(to_bytes(b.build({"quantization": "{}"})), device="cpu", cache_dir=None)
    assert "onnxruntime" not in capfd.readouterr().err
    assert model.engine.decision["chosen"] == "int8" and "not measured" in model.engine.decision["why"]
    assert model.engine.int8_form == "as stored"
    assert model(np.ones((1, 1, 304), np.float32)).shape == (1, 2, 5)


def test_on_many_cores_the_two_forms_are_compared_at_their_fastest_thread_counts(tmp_path, monkeypatch):
    from lite.engines.ort import int8_choice, thread_choice

    monkeypatch.setattr(thread_choice, "usable_cores", lambda: 16)
    monkeypatch.setattr(thread_choice, "SMALL_CALL_MS", float("inf"))  # small on any machine, however slow
    # At the default thread count the int8 kernels lead; at 2 threads, where small calls will run,
    # the float form is faster than either: the int8 choice must see that.
    timed = {}

    def alternate(calls, feeds, rounds, warmup_s, measure_s):
        timed.setdefault("labels", []).append(set(calls))
        base = {"int8": 1.0, "float": 1.3, "int8 at 2 threads": 0.9, "float at 2 threads": 0.6,
                "int8 at 4 threads": 0.95, "float at 4 threads": 0.7}
        for call in calls.values():  # each runner really runs
            call(feeds)
        return {label: [base[label]] * rounds for label in calls}

    monkeypatch.setattr(int8_choice, "alternate", alternate)
    path = tmp_path / "residual.lite"
    path.write_bytes(_residual())
    model = lite.Model.load(path, device="cpu", cache_dir=tmp_path / "cache")
    assert timed["labels"][0] == {"int8", "float", "int8 at 2 threads", "float at 2 threads",
                                  "int8 at 4 threads", "float at 4 threads"}
    decision = model.engine.decision
    assert decision["chosen"] == "float" and decision["float_over_int8"] == pytest.approx(0.6 / 0.9)
    assert "fastest thread count" in decision["why"] and model.engine.int8_form == "float form"
    # The thread choice reads the kept form's rounds instead of timing the same sessions again.
    assert len(timed["labels"]) == 1
    threads = model.engine.threads_decision
    assert threads["chosen"] == "2" and threads["rounds"]["2"] == [pytest.approx(0.6 / 1.3)] * 5
    assert isinstance(model.engine.direct, thread_choice.SizedSessions)
    floated = lite.Model.load(path, device="cpu", cache_dir=None, threads=2, int8_compute="float")
    np.testing.assert_allclose(model.predict(_feeds())["pooled"], floated.predict(_feeds())["pooled"], rtol=1e-5,
                               atol=1e-7)


def test_without_many_cores_the_int8_choice_times_the_default_count_alone(tmp_path, monkeypatch):
    from lite.engines.ort import int8_choice, thread_choice

    monkeypatch.setattr(thread_choice, "usable_cores", lambda: thread_choice.MIN_CORES - 1)
    labels = []

    def alternate(calls, feeds, rounds, warmup_s, measure_s):
        labels.append(set(calls))
        return {label: [1.0] * rounds for label in calls}

    monkeypatch.setattr(int8_choice, "alternate", alternate)
    path = tmp_path / "residual.lite"
    path.write_bytes(_residual())
    lite.Model.load(path, device="cpu", cache_dir=None)
    assert labels == [{"int8", "float"}]
