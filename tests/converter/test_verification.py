"""Verification helps instead of blocking: inputs the model accepts, IEEE-aware comparison with a
floor and the reference's own spread, skipped (not failed) when the check cannot run, and a
genuine mismatch names the first diverging node."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from passtools import make_model, rng, scale_last_conv

import converter
import lite
from converter import api, cli
from converter.errors import InvalidOptionError, VerificationError
from converter.passes import DEFAULT_PASSES

pytest.importorskip("onnxruntime")


def _two_convs():
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 8, 8] input) => (float[N, 4, 8, 8] output) {
            h1 = Conv <pads: ints = [1, 1, 1, 1]> (input, w1)
            r1 = Relu (h1)
            h2 = Conv <pads: ints = [1, 1, 1, 1]> (r1, w2)
            s = Softmax <axis: int = 1> (h2)
            output = Mul (s, s)
        }""",
        w1=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        w2=rng().normal(size=(4, 4, 3, 3)).astype(np.float32),
    )


@pytest.fixture()
def buggy_pass(monkeypatch):
    monkeypatch.setattr(api, "DEFAULT_PASSES", (*DEFAULT_PASSES, scale_last_conv))


def test_a_genuine_mismatch_fails_naming_the_first_diverging_node(buggy_pass, tmp_path):
    output, report_path = tmp_path / "m.lite", tmp_path / "r.json"
    with pytest.raises(VerificationError, match="First diverging node") as caught:
        converter.convert(_two_convs(), output, report_path=report_path)
    assert "tensor 'h2'" in str(caught.value)
    assert not output.exists()
    verification = json.loads(report_path.read_text())["verification"]
    assert verification["status"] == "failed" and verification["passed"] is False
    divergence = verification["divergence"]
    # h1 is not compared: the converted model's h1 is the fused Conv+Relu, a different value
    assert divergence["tensor"] == "h2" and divergence["op_type"] == "Conv"


def test_the_converted_model_keeps_agreeing_without_the_bug(tmp_path):
    report = converter.convert(_two_convs(), tmp_path / "m.lite")
    assert report.verification.passed and report.verification.status == "passed"
    assert "synthesized" in report.verification.inputs


def test_inputs_are_sized_for_a_reflect_pad_and_indexed_within_the_table(tmp_path):
    """Size 1 breaks a reflect Pad and ids in [0, 4) overrun a 2-row table: both used to abort."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, H, W] image, int64[N, T] token_type_ids) => (float[N, 3, H2, W2] padded, float[N, T, 5] embedded) {
            padded = Pad <mode: string = "reflect"> (image, pads)
            embedded = Gather (table, token_type_ids)
        }""",
        pads=np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64),
        table=rng().normal(size=(2, 5)).astype(np.float32),
    )
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()


def test_ids_read_by_embed_layer_normalization_stay_within_its_tables(tmp_path):
    """ONNX Runtime's fused BERT embedding (com.microsoft EmbedLayerNormalization) looks token ids
    up in input 2's rows and segment ids in input 4's (2 rows: BERT's token types); ids in
    [0, 4) made ONNX Runtime refuse every synthesized input, and verification was skipped."""
    hidden = 8
    tables = {"word": (50, hidden), "position": (64, hidden), "segment": (2, hidden)}
    node = helper.make_node("EmbedLayerNormalization", ["ids", "segments", "word", "position", "segment", "gamma",
                                                        "beta"], ["y", "mask_index"], domain="com.microsoft")
    initializers = [numpy_helper.from_array(rng().normal(size=shape).astype(np.float32), name)
                    for name, shape in tables.items()]
    initializers += [numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
                     numpy_helper.from_array(np.zeros(hidden, np.float32), "beta")]
    graph = helper.make_graph(
        [node], "embed",
        [helper.make_tensor_value_info(name, TensorProto.INT32, ["B", "L"]) for name in ("ids", "segments")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", hidden])], initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    feeds = report.verification.feeds
    assert feeds["segments"].max() < 2 and feeds["ids"].max() < 50
    assert feeds["segments"].max() == 1 and feeds["ids"].max() >= 4  # the whole of each table, not [0, 4)


def test_verification_is_skipped_not_failed_when_no_input_can_be_synthesized(tmp_path, capsys):
    """A bfloat16 input: the output is written, the command succeeds, and the report says why."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    path = tmp_path / "bf16.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    output = tmp_path / "m.lite"
    assert cli.main(["convert", str(path), "-o", str(output)]) == 0
    assert output.exists()
    printed = capsys.readouterr().out
    assert "verification skipped" in printed and "bfloat16" in printed
    report = converter.convert(path, output)
    assert report.verification.skipped and "bfloat16" in report.verification.reason


def test_nan_where_the_reference_has_nan_agrees(tmp_path):
    """Pow of a negative base to a fractional power is NaN on both sides."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 8] x) => (float[N, 8] y) { y = Pow (x, e) }""",
        e=np.array(0.5, np.float32),
    )
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed


def test_the_absolute_floor_keeps_tiny_outputs_from_failing(tmp_path):
    """Sigmoid far in its tail: outputs near 1e-9 where float32 arithmetic differs in relative terms."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 8] x) => (float[N, 8] y) { s = Sub (x, shift)
            y = Sigmoid (s) }""",
        shift=np.array(20.0, np.float32),
    )
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    assert report.verification.tolerance.atol == 1e-6


def test_verify_data_replaces_synthesized_inputs(tmp_path):
    samples = tmp_path / "samples.npz"
    np.savez(samples, input=rng().normal(size=(2, 3, 8, 8)).astype(np.float32))
    report = converter.convert(_two_convs(), tmp_path / "m.lite", verify_data=str(samples))
    assert report.verification.passed and report.verification.inputs == "the samples given (verify data)"


def test_verify_data_holds_whole_inputs_scalars_included(tmp_path):
    """A .npz holds each input as the model takes it: a 0-d rate, a state with the batch on axis 1."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x, float[2, N, 3] state, int64 sr) => (float[N, 4] y, float[2, N, 3] s2) {
            rate = Cast <to: int = 1> (sr)
            y = Mul (x, rate)
            s2 = Add (state, rate)
        }"""
    )
    samples = tmp_path / "samples.npz"
    np.savez(samples, x=np.ones((3, 4), np.float32), state=np.zeros((2, 3, 3), np.float32), sr=np.array(16000))
    report = converter.convert(model, tmp_path / "m.lite", verify_data=str(samples))
    assert report.verification.passed


def test_verify_data_the_original_rejects_is_an_option_error(tmp_path):
    samples = tmp_path / "samples.npz"
    np.savez(samples, input=np.zeros((1, 5, 8, 8), np.float32))  # 5 channels where the model takes 3
    with pytest.raises(InvalidOptionError, match="verify data"):
        converter.convert(_two_convs(), tmp_path / "m.lite", verify_data=str(samples))
    missing = tmp_path / "missing.npz"
    np.savez(missing, other=np.zeros(3, np.float32))
    with pytest.raises(InvalidOptionError, match="no array named 'input'"):
        converter.convert(_two_convs(), tmp_path / "m.lite", verify_data=str(missing))


def test_negative_tolerances_are_refused(tmp_path):
    with pytest.raises(InvalidOptionError, match="tolerances"):
        converter.convert(_two_convs(), tmp_path / "m.lite", rtol=-1.0)


def test_a_tensor_whose_reader_was_folded_away_is_not_blamed(monkeypatch, tmp_path):
    """Conv → BatchNormalization folds into one Conv that keeps the Conv's output name but
    computes the normalized values: that name must not be compared with the original's."""
    from converter import api

    monkeypatch.setattr(api, "DEFAULT_PASSES", (*DEFAULT_PASSES, scale_last_conv))
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 8, 8] input) => (float[N, 4, 8, 8] output) {
            h1 = Conv <pads: ints = [1, 1, 1, 1]> (input, w1)
            b1 = BatchNormalization (h1, gamma, beta, mean, var)
            h2 = Conv <pads: ints = [1, 1, 1, 1]> (b1, w2)
            s = Softmax <axis: int = 1> (h2)
            output = Mul (s, s)
        }""",
        w1=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        gamma=np.full(4, 1.5, np.float32), beta=np.full(4, 0.1, np.float32),
        mean=np.full(4, 0.2, np.float32), var=np.full(4, 2.0, np.float32),
        w2=rng().normal(size=(4, 4, 3, 3)).astype(np.float32),
    )
    report_path = tmp_path / "r.json"
    with pytest.raises(VerificationError):
        converter.convert(model, tmp_path / "m.lite", report_path=report_path)
    divergence = json.loads(report_path.read_text())["verification"]["divergence"]
    assert divergence["tensor"] == "h2", divergence  # not h1, which the fold changed on purpose


def _streaming_vad_like() -> onnx.ModelProto:
    """Silero VAD's contract: one 512-sample chunk per call, a sample rate the graph checks with
    Equal(sr, 16000) before an If, and a recurrent state [2, ?, 128] whose unnamed axis is the batch.
    The original rejects any other chunk size, rate branch or state batch."""
    chunk = helper.make_tensor_value_info("chunk", TensorProto.FLOAT, [1, 512])
    then_branch = helper.make_graph(
        [helper.make_node("Reshape", ["input", "chunk_shape"], ["chunk"])], "rate_16k", [], [chunk])
    else_branch = helper.make_graph(
        [helper.make_node("Reshape", ["input", "half_shape"], ["chunk"])], "rate_8k", [], [chunk])
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["chunk"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("ReduceMean", ["chunk"], ["output"], axes=[1], keepdims=1),
        helper.make_node("Reshape", ["state", "state_shape"], ["state_n"]),
    ]
    graph = helper.make_graph(
        nodes, "vad_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, None]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, 128]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("state_n", TensorProto.FLOAT, [2, 1, 128])],
        [numpy_helper.from_array(np.array(16000, np.int64), "rate"),
         numpy_helper.from_array(np.array([1, 512], np.int64), "chunk_shape"),
         numpy_helper.from_array(np.array([2, 256], np.int64), "half_shape"),
         numpy_helper.from_array(np.array([2, 1, 128], np.int64), "state_shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_synthesized_inputs_fit_a_streaming_voice_model(tmp_path):
    report = converter.convert(_streaming_vad_like(), tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    assert "input[1, 512], state[2, 1, 128], sr[]" in report.verification.inputs


def test_a_rate_picked_out_of_a_reshaped_scalar_is_still_the_compared_constant(tmp_path):
    """Silero VAD's op18 export (torch.export): Equal(Gather(Reshape(sr, [-1]), 0), 16000)."""
    from converter.verification_inputs import plans

    model = _streaming_vad_like()
    model.graph.node[0].input[0] = "sr_0"
    model.graph.node.insert(0, helper.make_node("Gather", ["sr_flat", "first"], ["sr_0"], axis=0))
    model.graph.node.insert(0, helper.make_node("Reshape", ["sr", "flat"], ["sr_flat"]))
    model.graph.initializer.extend([numpy_helper.from_array(np.array([-1], np.int64), "flat"),
                                    numpy_helper.from_array(np.array(0, np.int64), "first")])
    assert next(plans(model)).values["sr"].equals == 16000
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()


def test_the_value_of_a_scalar_the_verification_ran_on_is_recorded_and_used(tmp_path):
    """lite bench, the ONNX Runtime engine's measurements at load and serving's warm-up feed the
    sample rate the converter verified with: a random or zero rate takes the 8 kHz branch, which
    rejects the recorded 512-sample chunk."""
    from lite.commands._inputs import random_inputs
    from lite.engines.ort.int8_choice import random_feeds
    from lite.format import load
    from lite.signature import SAMPLE_VALUES_KEY, sample_values
    from serving.config import parse_config
    from serving.metrics import Metrics
    from serving.model import ServedModel

    path = tmp_path / "m.lite"
    converter.convert(_streaming_vad_like(), path)
    assert json.loads(load(path).metadata[SAMPLE_VALUES_KEY]) == {"sr": 16000}
    model = lite.Model.load(path, device="numpy")
    assert sample_values(model.ir) == {"sr": 16000}
    feeds = random_inputs(model, batch=1, shapes={})
    assert feeds["sr"].shape == () and feeds["sr"].item() == 16000 and feeds["sr"].dtype == np.int64
    model.predict(feeds)
    assert random_feeds(model.ir)["sr"].item() == 16000
    config = parse_config({"warmup": {"batch_size": 1, "count": 1}}, "vad")
    ServedModel.load("vad", 1, path, config, device="numpy", instances=1, max_queue_size=8, metrics=Metrics())


def test_an_input_compared_with_different_constants_gets_no_single_value():
    from converter.verification_inputs import feeds, plans

    model = _streaming_vad_like()
    model.graph.initializer.append(numpy_helper.from_array(np.array(8000, np.int64), "rate_8k"))
    model.graph.node.append(helper.make_node("Equal", ["sr", "rate_8k"], ["unused"]))
    plan = next(plans(model))
    assert plan.values["sr"].equals is None
    assert feeds(plan)["sr"].item() in range(4)


def _report_with(outputs, tolerance):
    from converter.report import ConversionReport
    from converter.verify import FAILED, PASSED, Verification

    report = ConversionReport("m.onnx", "m.lite", "lite", "", "", {})
    status = PASSED if all(output.within(tolerance) for output in outputs) else FAILED
    report.verification = Verification("cpu", tolerance, outputs, status)
    return report.table()


def test_the_report_line_says_which_bound_a_passing_output_met():
    """An output 3% off its peak passes only through the reference's own spread: the line says
    so instead of printing rtol 1e-4 beside an 'ok'."""
    from lite.compare import OutputError, Tolerance

    spread = Tolerance(1e-4, 1e-6, spread={"output0": 0.02}, spread_factor=2.0)
    error = OutputError("output0", 0.033, 0.033, 0.998816, magnitude=1.0, dtype=np.dtype(np.float32))
    line = next(line for line in _report_with([error], spread).splitlines() if "verify (cpu)" in line)
    assert ": ok " in line and "over rtol 0.0001; within the reference's own spread" in line
    assert "moves by 0.02" in line and "2 x that = 0.04 allowed on 'output0'" in line
    close = OutputError("output0", 5e-5, 5e-5, 1.0, magnitude=1.0, dtype=np.dtype(np.float32))
    assert "max rel 5e-05 (within rtol 0.0001)" in _report_with([close], spread)
    small = OutputError("output0", 3.2e-7, 0.0164, 1.0, magnitude=1.95e-5, dtype=np.dtype(np.float32))
    line = _report_with([small], spread)
    assert ": ok " in line and "max rel 0.0164 (over rtol 0.0001, max abs within atol 1e-06: the output's peak is only 1.95e-05)" in line
    half = OutputError("output0", 2e-3, 2e-3, 1.0, magnitude=1.0, dtype=np.dtype(np.float16))
    assert "within float16 rounding of its peak 1" in _report_with([half], Tolerance(1e-4, 1e-6))
    failed = OutputError("output0", 0.05, 0.05, 0.99, magnitude=1.0, dtype=np.dtype(np.float32))
    line = _report_with([failed], spread)
    assert "FAILED" in line and "(rtol 0.0001, atol 1e-06, or 2 x the reference's own spread 0.02)" in line


def test_a_model_neither_side_runs_converts_with_a_warning_that_it_failed_too(tmp_path, capsys):
    """An exporter's Unsqueeze past the rank: ONNX Runtime cannot load the original, and the
    converted model fails on every input; the conversion said only "verification skipped"."""
    graph = helper.make_graph([helper.make_node("Unsqueeze", ["x", "axes"], ["y"])], "bad_unsqueeze",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([5], np.int64), "axes")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = converter.convert(proto, tmp_path / "m.lite", optimize=False)
    assert report.verification.status == "skipped"
    assert any("the converted model fails on synthesized" in note and "Unsqueeze" in note
               for note in report.verification.notes), report.verification.notes


def test_with_verify_data_the_reference_implementation_settles_a_disagreement_with_onnx_runtime(tmp_path):
    """ONNX Runtime's approximate Sigmoid merges near logits: a TopK after it picks other indices
    than the exact sigmoid, which lite and onnx's reference implementation compute. The logits
    come from integer steps (no float input for the spread's nudge to move)."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["steps"], ["float_steps"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["float_steps", "spacing"], ["offsets"]),
         helper.make_node("Add", ["offsets", "eight"], ["x"]),
         helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("TopK", ["s", "k"], ["values", "indices"])],
        "scores", [helper.make_tensor_value_info("steps", TensorProto.INT32, [64])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [8])],
        [numpy_helper.from_array(np.array([8], np.int64), "k"),
         numpy_helper.from_array(np.array(1e-5, np.float32), "spacing"),  # logits closer than Sigmoid's steps
         numpy_helper.from_array(np.array(8.0, np.float32), "eight")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(64, dtype=np.int32)
    import onnxruntime

    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    if list(session.run(None, {"steps": x})[1]) == list(range(63, 55, -1)):
        pytest.skip("this ONNX Runtime computes Sigmoid exactly enough to order these logits")
    np.savez(tmp_path / "x.npz", steps=x)
    report = converter.convert(proto, tmp_path / "m.lite", verify_data=str(tmp_path / "x.npz"))
    assert report.verification.passed, report.verification.to_dict()
    assert any("departs from the ONNX reference implementation" in note for note in report.verification.notes)


def test_a_kernel_defect_on_a_node_reading_an_input_fails_the_verification(tmp_path, monkeypatch):
    """numpy 1.x refused a keyword numpy 2.1 added (TypeError) in the Conv kernel: since the
    node reads a model input, the failure was taken for inputs outside the model's domain and
    the conversion exited 0 with verification "skipped"."""
    import dataclasses

    from lite.ops import KERNELS

    real = KERNELS.select

    def faulty(*args, **kwargs):
        raise TypeError("'copy' is an invalid keyword argument for this function")

    def select(op_type, domain, version):
        kernel = real(op_type, domain, version)
        return dataclasses.replace(kernel, fn=faulty) if op_type == "Neg" and kernel is not None else kernel

    monkeypatch.setattr(KERNELS, "select", select)
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(VerificationError, match="TypeError: 'copy' is an invalid keyword"):
        converter.convert(proto, tmp_path / "m.lite", optimize=False)
