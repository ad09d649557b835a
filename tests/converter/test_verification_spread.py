"""The reference's own spread on a model that quantizes activations or picks by ArgMax: a float
summed in another order flips a quantized activation (or a near tie), which moves the output by a
step times the gain after it; the tolerance measures that under a 1e-6 input nudge, and still
fails a genuinely wrong model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from passtools import make_model, rng

import converter
from converter import api, cli
from converter.errors import VerificationError
from converter.passes import DEFAULT_PASSES
from converter.passes.base import PassResult
from converter.reference_session import ReferenceSession
from converter.verify import verify_conversion
from converter.verify_spread import LEVELS, NUDGED, nudged, quantizes_activations, selects_discretely
from lite.compare import Tolerance

pytest.importorskip("onnxruntime")

ROWS, WIDTH = 2048, 256  # ~500k quantized activations: a reordered sum flips a few of them

_QUANTIZED = f"""<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, {ROWS}, {WIDTH}] input) => (float[N, {ROWS}, 8] output) {{
        h = MatMul (input, w1)
        q = QuantizeLinear (h, scale, zero)
        d = DequantizeLinear (q, scale, zero)
        output = MatMul (d, w2)
    }}"""

# The same model with the first MatMul's sum split in two halves: mathematically equal, the
# float sums run in another order, as a converted model's kernels do.
_REORDERED = f"""<ir_version: 8, opset_import: ["" : 17]>
    g (float[N, {ROWS}, {WIDTH}] input) => (float[N, {ROWS}, 8] output) {{
        a, b = Split <axis: int = 2> (input, halves)
        h1 = MatMul (a, w1a)
        h2 = MatMul (b, w1b)
        h = Add (h2, h1)
        q = QuantizeLinear (h, scale, zero)
        d = DequantizeLinear (q, scale, zero)
        output = MatMul (d, w2)
    }}"""


def _weights():
    r = rng()
    w1 = (r.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    w2 = (r.normal(size=(WIDTH, 8)) * 10).astype(np.float32)  # a large gain after the quantization
    return w1, {"w2": w2, "scale": np.array(0.05, np.float32), "zero": np.array(0, np.int8)}


def _quantized():
    w1, common = _weights()
    return make_model(_QUANTIZED, w1=w1, **common)


def _reordered():
    w1, common = _weights()
    half = WIDTH // 2
    return make_model(_REORDERED, w1a=w1[:half], w1b=w1[half:], halves=np.array([half, half], np.int64), **common)


def _sample():
    return {"input": rng(1).normal(size=(1, ROWS, WIDTH)).astype(np.float32)}


def test_a_reordered_sum_passes_within_the_originals_movement_under_a_nudge():
    """Summed in another order, the model flips a few quantized activations: 1e-3 of the peak,
    over rtol 1e-4 and over ONNX Runtime's own spread between its optimization levels (none
    here), but within what the original moves under a 1e-6 nudge of its inputs."""
    original, feeds = _quantized(), _sample()
    reordered = ReferenceSession(_reordered(), what="the reordered model")
    expected = ReferenceSession(original).run(feeds)["output"]
    moved = np.abs(reordered.run(feeds)["output"] - expected).max()
    assert moved > 1e-4 * np.abs(expected).max()  # the premise: a flip, well over rtol

    verification = verify_conversion(original, reordered.run, "reordered", Tolerance(), verify_data=[feeds])
    assert verification.passed, verification.reason
    tolerance = verification.tolerance
    assert tolerance.spread_source == {"output": NUDGED}
    assert moved < 2 * tolerance.spread["output"] < 1e-2 * np.abs(expected).max()


def test_a_genuinely_wrong_quantized_model_still_fails():
    """3% on the last weight is far beyond a rounding flip: the nudge does not hide it."""
    original, feeds = _quantized(), _sample()
    w1, common = _weights()
    common["w2"] = common["w2"] * 1.03
    wrong = ReferenceSession(make_model(_QUANTIZED, w1=w1, **common), what="the wrong model")
    verification = verify_conversion(original, wrong.run, "wrong", Tolerance(), verify_data=[feeds])
    assert verification.status == "failed" and "allowed" in verification.reason
    assert verification.tolerance.spread_source == {"output": NUDGED}


def _scale_last_matmul(model: ir.Model, context) -> PassResult:
    """A deliberately wrong rewrite: the last MatMul's weight grows by 3%."""
    matmul = [node for node in model.graph if node.op_type == "MatMul"][-1]
    weight = matmul.inputs[1]
    weight.const_value = ir.tensor(weight.const_value.numpy() * 1.03, name=weight.name)
    return PassResult("scale_last_matmul", changed=1)


def test_a_wrong_pass_on_a_quantized_model_exits_4(monkeypatch, tmp_path):
    source, data = tmp_path / "q.onnx", tmp_path / "sample.npz"
    onnx.save(_quantized(), source)
    np.savez(data, **_sample())
    monkeypatch.setattr(api, "DEFAULT_PASSES", (*DEFAULT_PASSES, _scale_last_matmul))
    with pytest.raises(VerificationError, match="differs from the original"):
        converter.convert(_quantized(), tmp_path / "m.lite", verify_data=[_sample()])
    assert cli.main(["convert", str(source), "-o", str(tmp_path / "m.lite"), "--verify-data", str(data)]) == 4


def test_the_report_names_the_nudge_spread(tmp_path):
    report_path = tmp_path / "r.json"
    converter.convert(_quantized(), tmp_path / "m.lite", verify_data=[_sample()], report_path=report_path)
    tolerance = json.loads(report_path.read_text())["verification"]["tolerance"]
    assert tolerance["spread_source"] == {"output": NUDGED} and tolerance["spread"]["output"] > 0


def test_the_report_line_says_the_spread_came_from_the_nudge():
    from converter.report import verified_bound
    from lite.compare import OutputError

    tolerance = Tolerance(spread={"output": 1.5}, spread_source={"output": NUDGED})
    error = OutputError("output", 1.05, 1.05 / 726, 1.0, magnitude=726.0, dtype=np.dtype(np.float32))
    line = verified_bound(tolerance, error)
    assert "the original moves by 1.5 under a 1e-06 relative nudge of its inputs" in line
    assert "2 x that = 3 allowed on 'output'" in line
    wrong = OutputError("output", 20.0, 20.0 / 726, 0.99, magnitude=726.0, dtype=np.dtype(np.float32))
    assert verified_bound(tolerance, wrong).startswith("rtol 0.0001, atol 1e-06, or 2 x the reference's own "
                                                       "spread 1.5 under a 1e-06 relative nudge")
    levels = Tolerance(spread={"output": 1.5})  # no source recorded: the optimization levels
    assert f"moves by 1.5 {LEVELS}" in verified_bound(levels, error)


def test_the_report_line_of_integer_outputs_counts_elements():
    from converter.report import verified_bound
    from lite.compare import output_error

    tolerance = Tolerance(spread={"labels": 23.0})
    error = output_error("labels", np.arange(300), np.where(np.arange(300) < 27, -1, np.arange(300)))
    assert verified_bound(tolerance, error) == (
        f"27 elements differ, within the reference's own spread: the original differs in 23 {LEVELS}, "
        "2 x that = 46 allowed on 'labels'")


def test_a_float_model_gets_no_nudge(tmp_path):
    """Float noise is continuous and the optimization levels measure it: no nudge runs."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 16] input) => (float[N, 4] output) {
            output = MatMul (input, w)
        }""",
        w=rng().normal(size=(16, 4)).astype(np.float32),
    )
    assert not quantizes_activations(model)
    report = converter.convert(model, tmp_path / "m.lite")
    assert set((report.verification.tolerance.spread_source or {}).values()) <= {LEVELS}


def test_only_quantized_activations_count():
    """A weight stored in int8 (DequantizeLinear of an initializer) rounds nothing computed."""
    weight_only = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 16] input) => (float[N, 4] output) {
            w = DequantizeLinear (wq, scale, zero)
            output = MatMul (input, w)
        }""",
        wq=rng().integers(-100, 100, size=(16, 4)).astype(np.int8),
        scale=np.array(0.01, np.float32), zero=np.array(0, np.int8),
    )
    assert not quantizes_activations(weight_only)
    assert quantizes_activations(_quantized())


def test_the_nudge_is_relative_tiny_and_fixed():
    feeds = {"x": np.array([1.0, -2.0, 0.0, 4.0], np.float32), "n": np.array([3], np.int64)}
    first, again = list(nudged(feeds)), list(nudged(feeds))
    assert len(first) == 8
    for pattern, same in zip(first, again):
        np.testing.assert_array_equal(pattern["x"], same["x"])  # a fixed seed: the same check each time
        np.testing.assert_array_equal(pattern["n"], feeds["n"])  # integers stay as given
        change = np.abs(pattern["x"] - feeds["x"])
        assert np.all(change <= 2e-6 * np.abs(feeds["x"])) and pattern["x"][2] == 0.0
    assert any(np.any(pattern["x"] != feeds["x"]) for pattern in first)
    assert list(nudged({"n": feeds["n"]})) == []


_HEATMAP = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 512, 64] input) => (int64[1, 512, 1] peak) {
        h = MatMul (input, w)
        peak = ArgMax <axis: int = 2> (h)
    }"""
_HEATMAP_REORDERED = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 512, 64] input) => (int64[1, 512, 1] peak) {
        a, b = Split <axis: int = 2> (input, halves)
        h1 = MatMul (a, wa)
        h2 = MatMul (b, wb)
        h = Add (h2, h1)
        peak = ArgMax <axis: int = 2> (h)
    }"""


def test_a_near_tie_an_argmax_flips_is_within_the_nudge_spread():
    """Keypoint R-CNN's keypoints are the maxima of heatmaps: two columns of nearly equal weights
    make near ties, and a sum in another order picks the other column of some of them, which the
    optimization levels (the same sums) never do; the nudge does, so verification passes."""
    r = rng(3)
    w = r.normal(size=(64, 8)).astype(np.float32)
    w[:, 1] = w[:, 0] + r.normal(size=64).astype(np.float32) * 1e-6
    original = make_model(_HEATMAP, w=w)
    assert selects_discretely(original)
    halves = np.array([32, 32], np.int64)
    reordered = ReferenceSession(make_model(_HEATMAP_REORDERED, wa=w[:32], wb=w[32:], halves=halves), what="the reordered model")
    feeds = {"input": r.normal(size=(1, 512, 64)).astype(np.float32)}
    expected = ReferenceSession(original).run(feeds)["peak"]
    flips = int(np.count_nonzero(reordered.run(feeds)["peak"] != expected))
    assert flips > 0  # the premise: the order of the sums flips some near ties
    verification = verify_conversion(original, reordered.run, "reordered", Tolerance(), verify_data=[feeds])
    assert verification.passed, verification.reason
    assert verification.tolerance.spread_source == {"peak": NUDGED}


def test_an_argmax_of_a_constant_is_no_selection_to_nudge():
    constant = make_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (int64[1] peak) { peak = ArgMax (table) }""", table=np.arange(4, dtype=np.float32))
    assert not selects_discretely(constant)
