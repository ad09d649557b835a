"""Half-precision compute lowering for GPUs (checked on the CPU with onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.format import GraphBuilder, load, to_bytes

onnx = pytest.importorskip("onnx", reason="lowering needs onnx (the ort extra)")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from lite.engines.ort.half import has_half_weights, to_half_compute  # noqa: E402
from lite.format.onnx.lower import lower_model  # noqa: E402
from tests.lite.half_models import norm_then_masked_softmax  # noqa: E402


def fp16_weight_model():
    """What `lite convert --fp16` writes: float16 weights read through Cast(to=FLOAT)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("half", opset=17)
    x = b.input("x", np.float32, ["N", 8])
    w = b.node("Cast", [b.constant("w_fp16", rng.standard_normal((8, 4)).astype(np.float16))], to=1)
    y = b.node("MatMul", [x, w])
    y = b.node("Add", [y, b.constant("bias", np.full(4, 0.5, np.float32))], fused_activation="Relu")
    y = b.node("Softmax", [y], outputs=["probabilities"], axis=-1)
    b.output(y, np.float32, ["N", 4])
    return load(to_bytes(b.build()))


def test_half_compute_keeps_the_interface_and_matches_float32():
    model = fp16_weight_model()
    lowered = lower_model(model, external_weights=False)
    assert has_half_weights(lowered)
    half = to_half_compute(lowered)
    onnx.checker.check_model(half.model, full_check=True)
    graph = half.model.graph
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert {t.data_type for t in graph.initializer} == {onnx.TensorProto.FLOAT16}
    casts = [n for n in graph.node if n.op_type == "Cast"]
    assert casts[0].name == "x/to_fp16" and casts[-1].name == "probabilities/to_fp32"
    assert all(a.i == onnx.TensorProto.FLOAT16 for n in casts[1:-1] for a in n.attribute if a.name == "to")
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    full = ReferenceEvaluator(lowered.model).run(None, {"x": x})[0]
    reduced = ReferenceEvaluator(half.model).run(None, {"x": x})[0]
    assert reduced.dtype == np.float32
    np.testing.assert_allclose(reduced, full, atol=2e-3)


def test_external_weights_are_converted_consistently():
    rng = np.random.default_rng(2)
    b = GraphBuilder("ext", opset=17)
    x = b.input("x", np.float32, [1, 32])  # a 32x32 weight: large enough to be handed over in place
    y = b.node("MatMul", [x, b.constant("w", rng.standard_normal((32, 32)).astype(np.float32))], outputs=["y"])
    b.output(y, np.float32, [1, 32])
    lowered = lower_model(load(to_bytes(b.build())))
    assert not has_half_weights(lowered)
    half = to_half_compute(lowered)
    assert half.external["w"].dtype == np.float16
    declared = {t.name: t for t in half.model.graph.initializer}["w"]
    assert declared.data_type == onnx.TensorProto.FLOAT16
    assert dict((e.key, e.value) for e in declared.external_data)["length"] == str(32 * 32 * 2)


def test_constants_float16_cannot_hold_are_clamped_not_flushed():
    """A decomposed LayerNorm's 1e-12 epsilon flushed to 0 gives NaN on a constant row, and an
    attention mask's -3.4e38 become -inf gives NaN on a fully masked row."""
    half = to_half_compute(lower_model(load(norm_then_masked_softmax()), external_weights=False))
    values = {t.name: onnx.numpy_helper.to_array(t) for t in half.model.graph.initializer}
    assert values["epsilon"] == np.float16(2.0 ** -24)
    assert (values["mask"] == -np.finfo(np.float16).max).all()
    x = np.array([[1, 1, 1, 1], [0, 1, 2, 3]], np.float32)
    y = ReferenceEvaluator(half.model).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, np.full((2, 4), 0.25), atol=2e-3)


def test_fp16_precision_is_refused_on_the_cpu():
    pytest.importorskip("onnxruntime")
    import lite

    with pytest.raises(ValueError, match="precision='fp16' needs a GPU"):
        lite.Model.load(to_bytes(GraphBuilder("e").build()), device="cpu", precision="fp16")
