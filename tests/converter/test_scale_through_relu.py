"""fold_scale_through_relu: a positive per-channel Mul (+ Add) → Relu → Conv loses the Mul."""

from __future__ import annotations

import numpy as np
import pytest
from passtools import apply, assert_same_outputs, make_model, ops, rng

from converter.passes import DEFAULT_PASSES, fold_scale_through_relu

CHAIN = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 4, 8, 8] x) => (float[2, 6, 8, 8] y) {{
    m = Mul (x, s)
    {add}
    r = Relu ({relu_input})
    y = Conv <pads: ints = [1, 1, 1, 1], group: int = {group}> (r, w)
}}"""


def _chain(*, add: bool = True, group: int = 1) -> str:
    return CHAIN.format(add="a = Add (m, t)" if add else "", relu_input="a" if add else "m", group=group)


def _weights(group: int = 1, s: np.ndarray | None = None, add: bool = True) -> dict[str, np.ndarray]:
    weights = {
        "s": (rng(1).uniform(0.2, 3.0, size=(4, 1, 1)) if s is None else s).astype(np.float32),
        "w": rng(2).normal(size=(6, 4 // group, 3, 3)).astype(np.float32),
    }
    if add:
        weights["t"] = rng(3).normal(size=(4, 1, 1)).astype(np.float32)
    return weights


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("add", [True, False])
def test_positive_scale_moves_into_the_padded_conv(group, add):
    model = make_model(_chain(add=add, group=group), **_weights(group, add=add))
    rewritten, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 1
    assert ops(rewritten) == (["Add", "Relu", "Conv"] if add else ["Relu", "Conv"])
    assert_same_outputs(model, rewritten)


def test_negative_scale_is_declined():
    s = np.array([1.0, -0.5, 2.0, 1.5], np.float32).reshape(4, 1, 1)
    model = make_model(_chain(), **_weights(s=s))
    rewritten, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 0 and ops(rewritten) == ["Mul", "Add", "Relu", "Conv"]
    assert "positive scales only" in result.declined[0]


def test_zero_scale_is_declined():
    s = np.array([1.0, 0.0, 2.0, 1.5], np.float32).reshape(4, 1, 1)
    model = make_model(_chain(), **_weights(s=s))
    _, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 0 and "positive scales only" in result.declined[0]


def test_spatial_scale_is_declined():
    model = make_model(_chain(), **_weights(s=rng(4).uniform(0.5, 1.0, size=(1, 1, 8)).astype(np.float32)))
    _, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 0 and "not one value per input channel" in result.declined[0]


def test_relu_read_elsewhere_is_left_alone():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4, 8, 8] x) => (float[2, 6, 8, 8] y, float[2, 4, 8, 8] r) {
            m = Mul (x, s)
            a = Add (m, t)
            r = Relu (a)
            y = Conv <pads: ints = [1, 1, 1, 1]> (r, w)
        }""",
        **_weights(),
    )
    rewritten, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 0 and ops(rewritten) == ["Mul", "Add", "Relu", "Conv"]


def test_preactivation_batchnorm_keeps_only_its_shift():
    """DenseNet's pattern: Concat → BatchNormalization → Relu → Conv, no layer to fold into."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 2, 8, 8] x, float[2, 2, 8, 8] z) => (float[2, 6, 8, 8] y) {
            c = Concat <axis: int = 1> (x, z)
            b = BatchNormalization (c, gamma, beta, mean, var)
            r = Relu (b)
            y = Conv <pads: ints = [1, 1, 1, 1]> (r, w)
        }""",
        gamma=rng(1).uniform(0.5, 2.0, size=4).astype(np.float32),
        beta=rng(2).normal(size=4).astype(np.float32),
        mean=rng(3).normal(size=4).astype(np.float32),
        var=rng(4).uniform(0.5, 2.0, size=4).astype(np.float32),
        w=rng(5).normal(size=(6, 4, 3, 3)).astype(np.float32),
    )
    rewritten, _ = apply(model, *DEFAULT_PASSES)
    assert ops(rewritten) == ["Concat", "Add", "Relu", "Conv"]
    assert_same_outputs(model, rewritten)


HEAD = """<ir_version: 8, opset_import: ["" : 18]>
g (float[2, 4, 8, 8] x) => (float[2, 5] y) {{
    m = Mul (x, s)
    a = Add (m, t)
    r = Relu (a)
    p = ReduceMean <keepdims: int = 1> (r, axes)
    f = Reshape (p, shape)
    y = Gemm <transB: int = {trans_b}> (f, w)
}}"""


@pytest.mark.parametrize("trans_b", [0, 1])
def test_scale_reaches_the_classifier_through_pooling_and_reshape(trans_b):
    weights = _weights()
    weights["w"] = rng(5).normal(size=(5, 4) if trans_b else (4, 5)).astype(np.float32)
    weights["axes"] = np.array([2, 3], np.int64)
    weights["shape"] = np.array([-1, 4], np.int64)
    model = make_model(HEAD.format(trans_b=trans_b), **weights)
    rewritten, _ = apply(model, *DEFAULT_PASSES)
    assert "Mul" not in ops(rewritten)
    assert_same_outputs(model, rewritten)


def test_pooling_over_channels_is_declined():
    weights = _weights()
    weights["w"] = rng(5).normal(size=(1, 5)).astype(np.float32)
    weights["axes"] = np.array([1, 2, 3], np.int64)
    weights["shape"] = np.array([-1, 1], np.int64)
    model = make_model(HEAD.format(trans_b=0), **weights)
    rewritten, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 0 and "Mul" in ops(rewritten)
    assert "channel axis" in result.declined[0]


def test_a_scale_that_would_overflow_the_shift_is_declined():
    # A BatchNormalization with a near-zero gamma: t/s overflows float32, so the Mul stays.
    s = np.array([1.0, 1e-39, 2.0, 1.5], np.float32).reshape(4, 1, 1)
    model = make_model(_chain(), **_weights(s=s))
    rewritten, [result] = apply(model, fold_scale_through_relu)
    assert result.changed == 0 and ops(rewritten) == ["Mul", "Add", "Relu", "Conv"]
    assert "overflows" in result.declined[0]
