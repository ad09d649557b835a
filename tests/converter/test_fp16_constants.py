"""store_weights_fp16 keeps in float32 the constants that float16 would move for nothing: small
ones (epsilons, bounds) and tensors lying in float16's subnormals; it reports values it flushes."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from passtools import make_model, rng

import converter
import lite
from converter.onnx_export import to_onnx
from converter.passes import run_passes, store_weights_fp16
from converter.passes.base import PassContext
from converter.reference_session import run_onnxruntime

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'

# A graph network's inverse distance (its distances clipped at 1e-6) beside F.normalize's
# x / (||x|| + 1e-12): in float16, 1e-6 reads 1.0133e-6 and 1e-12 reads 0.
EPSILON_MODEL = f"""{HEADER}
    g (float[4] d, float[2, 4] x) => (float[4] inv, float[2, 4] xn) {{
        dc = Clip (d, lo)
        inv = Reciprocal (dc)
        n = ReduceL2 <axes: ints = [1], keepdims: int = 1> (x)
        ne = Add (n, eps)
        xn = Div (x, ne)
    }}"""
FEEDS = {"d": np.array([0.0, 5e-7, 0.5, 2.0], np.float32),
         "x": np.array([[0, 0, 0, 0], [1, 2, 3, 4]], np.float32)}


def _epsilon_model():
    return make_model(EPSILON_MODEL, lo=np.array(1e-6, np.float32), eps=np.array(1e-12, np.float32))


def _halve(model) -> tuple[ir.Model, PassContext, object]:
    graph = ir.serde.deserialize_model(model)
    context = PassContext()
    [result] = run_passes(graph, (store_weights_fp16,), context)
    return graph, context, result


def test_epsilons_stay_float32_and_the_outputs_stay_exact():
    model = _epsilon_model()
    graph, context, result = _halve(model)
    assert graph.graph.initializers["lo"].dtype == ir.DataType.FLOAT
    assert graph.graph.initializers["eps"].dtype == ir.DataType.FLOAT
    assert result.counts["small constants kept"] == 2 and result.counts["weights"] == 0
    assert context.warnings == []
    expected = run_onnxruntime(model, FEEDS)
    got = run_onnxruntime(to_onnx(graph), FEEDS)
    np.testing.assert_array_equal(got["inv"], expected["inv"])
    np.testing.assert_array_equal(got["xn"], expected["xn"])  # the zero row stays 0, not NaN


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_fp16_conversion_of_epsilons_verifies_and_runs_on_each_engine(tmp_path, device):
    np.savez(tmp_path / "samples.npz", **FEEDS)
    report = converter.convert(_epsilon_model(), tmp_path / "m.lite", fp16=True, verify_data=tmp_path / "samples.npz")
    assert report.verification.passed
    outputs = lite.Model.load(tmp_path / "m.lite", device=device).predict(FEEDS)
    np.testing.assert_allclose(outputs["inv"], [1e6, 1e6, 2.0, 0.5], rtol=1e-6)
    np.testing.assert_array_equal(outputs["xn"][0], np.zeros(4, np.float32))


def test_a_tensor_of_subnormal_values_stays_float32():
    """Per-channel epsilons of 1e-5 lie in float16's subnormals, where a step is 6e-8: 0.3 % of them."""
    model = make_model(f"""{HEADER}
        g (float[64] x) => (float[64] y) {{ y = Add (x, eps) }}""", eps=np.full(64, 1e-5, np.float32))
    graph, _, result = _halve(model)
    assert graph.graph.initializers["eps"].dtype == ir.DataType.FLOAT
    assert result.counts["constants float16 cannot hold kept"] == 1 and result.counts["weights"] == 0


def test_weights_beyond_the_small_size_are_halved_and_flushed_values_are_reported():
    """A 17-element weight is halved; of its values, the two below float16's smallest subnormal
    become 0 and are counted (they move the weight by 1e-9 of its peak: nothing to keep it for)."""
    w = rng().normal(size=17).astype(np.float32)
    w[[3, 9]] = [1e-9, -2e-10]
    model = make_model(f"""{HEADER}
        g (float[17] x) => (float[17] y) {{ y = Mul (x, w) }}""", w=w)
    graph, context, result = _halve(model)
    (half,) = graph.graph.initializers.values()
    assert half.dtype == ir.DataType.FLOAT16 and result.counts["weights"] == 1
    assert context.warnings == ["fp16: 2 nonzero values in 1 weights are below float16's smallest subnormal (6e-8) "
                                "and became 0 (most in 'w': 2); each is under 0.001 of its weight's largest value"]
