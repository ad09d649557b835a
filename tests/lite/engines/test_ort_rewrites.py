"""The lowered model in ONNX Runtime's preferred forms: declared shapes, scale + shift (or a shift alone) as BatchNormalization."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes
from lite.format.dtypes import DataType

ort = pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
onnx = pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")

from onnx.reference import ReferenceEvaluator

from lite.engines.ort import rewrites
from lite.format import load
from lite.format.onnx.lower import lower_model

RULE = {rule.name: rule for rule in rewrites.RULES}["scale_shift_as_batchnorm"]
SHIFT_RULE = {rule.name: rule for rule in rewrites.RULES}["shift_as_batchnorm"]


def _scale_shift(scale_shape=(6, 1, 1), shift_shape=(6, 1, 1), rank=4, shared=False, seed=0) -> bytes:
    """Concat → Mul(scale) → Add(shift) → Relu, the converter's form of a BatchNormalization after a Concat."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("scale_shift", opset=17)
    shape = [1, 3, 5, 4][:rank]
    x = b.input("x", np.float32, ["N", *shape[1:]])
    joined = b.node("Concat", [x, x], axis=1)
    scaled = b.node("Mul", [joined, b.constant("s", rng.standard_normal(scale_shape).astype(np.float32))])
    shifted = b.node("Add", [scaled, b.constant("t", rng.standard_normal(shift_shape).astype(np.float32))])
    y = b.node("Relu", [shifted], outputs=["y"])
    b.output(y, np.float32, ["N", 6, *shape[2:]])
    if shared:
        b.output(b.node("Neg", [scaled], outputs=["z"]), np.float32, ["N", 6, *shape[2:]])
    model = b.build()
    for tensor in model.main.tensors:  # what the converter's shape inference records
        if not tensor.is_constant and tensor.name != "x":
            tensor.dtype, tensor.shape = DataType.FLOAT, ("N", 6, *shape[2:])
    return to_bytes(model)


def _lowered(data: bytes):
    return lower_model(load(data), external_weights=False)


def _feeds(rank=4, seed=1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal([2, 3, 5, 4][:rank]).astype(np.float32)}


@pytest.mark.parametrize("scale_shape, shift_shape", [((6, 1, 1), (6, 1, 1)), ((1, 6, 1, 1), (6, 1, 1)),
                                                      ((6, 1, 1), (1,))])
def test_scale_shift_becomes_batchnorm(scale_shape, shift_shape):
    lowered = _lowered(_scale_shift(scale_shape, shift_shape))
    expected = ReferenceEvaluator(lowered.model).run(None, _feeds())[0]
    assert rewrites.apply(lowered) == {"scale_shift_as_batchnorm": 1, "shift_as_batchnorm": 0}
    ops = [node.op_type for node in lowered.model.graph.node]
    assert ops == ["Concat", "BatchNormalization", "Relu"]
    onnx.checker.check_model(lowered.model, full_check=True)
    got = ReferenceEvaluator(lowered.model).run(None, _feeds())[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    unread = {init.name for init in lowered.model.graph.initializer} - {i for n in lowered.model.graph.node for i in n.input}
    assert not unread


def test_rank_two_scale_shift_becomes_batchnorm():
    lowered = _lowered(_scale_shift((6,), (6,), rank=2))
    expected = ReferenceEvaluator(lowered.model).run(None, _feeds(rank=2))[0]
    assert rewrites.apply(lowered)["scale_shift_as_batchnorm"] == 1
    np.testing.assert_allclose(ReferenceEvaluator(lowered.model).run(None, _feeds(rank=2))[0], expected, rtol=1e-6)


@pytest.mark.parametrize("kwargs, reason", [
    ({"shared": True}, None),  # the Mul's output is read twice: no match at all
    ({"scale_shape": (6, 5, 1)}, "varies along an axis other than 1"),
    ({"scale_shape": (6,), "shift_shape": (6,)}, "varies along an axis other than 1"),  # broadcasts on the last axis
    ({"scale_shape": (1,), "shift_shape": (1,)}, "one scale for every channel"),
])
def test_scale_shift_declines(kwargs, reason):
    lowered = _lowered(_scale_shift(**kwargs))
    declined = rewrites.declined(lowered, RULE)
    assert rewrites.apply(lowered, rules=(RULE,))["scale_shift_as_batchnorm"] == 0
    assert "BatchNormalization" not in [node.op_type for node in lowered.model.graph.node]
    if reason is None:
        assert declined == []
    else:
        assert len(declined) == 1 and reason in declined[0][1]


def test_scale_shift_declines_without_a_rank():
    lowered = _lowered(_scale_shift())
    del lowered.model.graph.value_info[:]
    assert rewrites.declined(lowered, RULE)[0][1].startswith("the rank of")
    assert rewrites.apply(lowered)["scale_shift_as_batchnorm"] == 0


def test_engine_runs_scale_shift_as_batchnorm_with_the_same_results():
    data = _scale_shift()
    model = lite.Model.load(data, device="cpu", threads=1, cache_dir=None)
    reference = lite.Model.load(data, device="numpy")
    feeds = _feeds()
    np.testing.assert_allclose(model.predict(feeds)["y"], reference.predict(feeds)["y"], rtol=1e-6, atol=1e-6)


def test_lowering_declares_intermediate_shapes():
    """Every tensor produced inside the graph carries its .lite type and shape (symbolic sizes too)."""
    lowered = _lowered(_scale_shift())
    declared = {value.name: value for value in lowered.model.graph.value_info}
    produced = {name for node in lowered.model.graph.node for name in node.output} - {"y"}
    assert set(declared) == produced - {name for name in produced if "__before_" in name}
    for value in declared.values():
        dims = value.type.tensor_type.shape.dim
        assert [d.dim_param or d.dim_value for d in dims] == ["N", 6, 5, 4]
        assert value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def _shift(after: str = "Concat", rank: int = 4, shift_shape=(6, 1, 1), seed=0) -> bytes:
    """Concat (or Conv) → Add(shift) → Relu: a BatchNormalization whose scale the converter moved on."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("shift", opset=17)
    shape = [1, 3, 5, 4][:rank]
    x = b.input("x", np.float32, ["N", *shape[1:]])
    if after == "Concat":
        joined = b.node("Concat", [x, x], axis=1)
    else:
        joined = b.node("Conv", [x, b.constant("w", rng.standard_normal((6, 3, 1, 1)).astype(np.float32))])
    shifted = b.node("Add", [b.constant("t", rng.standard_normal(shift_shape).astype(np.float32)), joined])
    b.output(b.node("Relu", [shifted], outputs=["y"]), np.float32, ["N", 6, *shape[2:]])
    model = b.build()
    for tensor in model.main.tensors:
        if not tensor.is_constant and tensor.name != "x":
            tensor.dtype, tensor.shape = DataType.FLOAT, ("N", 6, *shape[2:])
    return to_bytes(model)


def test_a_per_channel_shift_of_an_image_becomes_batchnorm():
    lowered = _lowered(_shift())
    expected = ReferenceEvaluator(lowered.model).run(None, _feeds())[0]
    assert rewrites.apply(lowered) == {"scale_shift_as_batchnorm": 0, "shift_as_batchnorm": 1}
    assert [node.op_type for node in lowered.model.graph.node] == ["Concat", "BatchNormalization", "Relu"]
    onnx.checker.check_model(lowered.model, full_check=True)
    np.testing.assert_allclose(ReferenceEvaluator(lowered.model).run(None, _feeds())[0], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kwargs, reason", [
    ({"after": "Conv"}, "after a Conv"),
    ({"rank": 3, "shift_shape": (6, 1)}, "not an image"),
    ({"shift_shape": (6, 5, 1)}, "not one value per channel"),
    ({"shift_shape": (1,)}, "not one value per channel"),
])
def test_a_shift_declines(kwargs, reason):
    lowered = _lowered(_shift(**kwargs))
    declined = rewrites.declined(lowered, SHIFT_RULE)
    assert rewrites.apply(lowered)["shift_as_batchnorm"] == 0
    assert len(declined) == 1 and reason in declined[0][1]


def test_engine_runs_a_shift_as_batchnorm_with_the_same_results():
    data = _shift()
    model = lite.Model.load(data, device="cpu", threads=1, cache_dir=None)
    reference = lite.Model.load(data, device="numpy")
    feeds = _feeds()
    np.testing.assert_allclose(model.predict(feeds)["y"], reference.predict(feeds)["y"], rtol=1e-6, atol=1e-6)
