"""fold_add_into_bias and fold_mul_into_weights."""

from __future__ import annotations

import numpy as np
import pytest
from passtools import apply, assert_same_outputs, make_model, ops, rng

from converter.passes import fold_add_into_bias, fold_mul_into_weights

CONV = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3, 8, 8] x) => (float[2, 4, 8, 8] y) {{
    h = Conv <pads: ints = [1, 1, 1, 1]> (x, w{bias})
    y = {op} ({order})
}}"""


@pytest.mark.parametrize("shape", [(4, 1, 1), (1, 4, 1, 1), (), (1,)])
@pytest.mark.parametrize("bias", ["", ", b"])
def test_per_channel_add_folds_into_conv_bias(shape, bias):
    weights = {"w": rng().normal(size=(4, 3, 3, 3)).astype(np.float32), "c": rng(1).normal(size=shape).astype(np.float32)}
    if bias:
        weights["b"] = rng(2).normal(size=4).astype(np.float32)
    model = make_model(CONV.format(bias=bias, op="Add", order="c, h"), **weights)
    rewritten, [result] = apply(model, fold_add_into_bias)
    assert result.changed == 1 and ops(rewritten) == ["Conv"]
    assert_same_outputs(model, rewritten)


def test_add_folds_into_gemm_bias():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 4] x) => (float[3, 5] y) {
            h = Gemm <transB: int = 1, beta: float = 2.0> (x, w, b)
            y = Add (h, c)
        }""",
        w=rng().normal(size=(5, 4)).astype(np.float32),
        b=rng(1).normal(size=5).astype(np.float32),
        c=rng(2).normal(size=(1, 5)).astype(np.float32),
    )
    rewritten, [result] = apply(model, fold_add_into_bias)
    assert result.changed == 1 and ops(rewritten) == ["Gemm"]
    assert_same_outputs(model, rewritten)


def test_add_declines_spatial_constant():
    model = make_model(
        CONV.format(bias="", op="Add", order="h, c"),
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        c=rng(1).normal(size=(1, 1, 8, 8)).astype(np.float32),
    )
    _, [result] = apply(model, fold_add_into_bias)
    assert result.changed == 0
    assert "not one value per output channel" in result.declined[0]


def test_add_declines_constant_that_would_raise_the_rank():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3, 8, 8] x) => (float[1, 2, 4, 8, 8] y) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = Add (h, c)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        c=np.ones((1, 1, 4, 1, 1), np.float32),
    )
    _, [result] = apply(model, fold_add_into_bias)
    assert result.changed == 0 and "not one value per output channel" in result.declined[0]


def test_add_leaves_matmul_add_alone():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 4] x) => (float[3, 5] y) {
            h = MatMul (x, w)
            y = Add (h, c)
        }""",
        w=rng().normal(size=(4, 5)).astype(np.float32),
        c=rng(1).normal(size=5).astype(np.float32),
    )
    _, [result] = apply(model, fold_add_into_bias)
    assert result.changed == 0 and result.declined == []


@pytest.mark.parametrize("shape", [(4, 1, 1), ()])
def test_per_channel_mul_folds_into_conv_weights(shape):
    model = make_model(
        CONV.format(bias=", b", op="Mul", order="h, c"),
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        b=rng(1).normal(size=4).astype(np.float32),
        c=rng(2).normal(size=shape).astype(np.float32),
    )
    rewritten, [result] = apply(model, fold_mul_into_weights)
    assert result.changed == 1 and ops(rewritten) == ["Conv"]
    assert_same_outputs(model, rewritten)


def test_mul_folds_into_matmul_add():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x) => (float[N, 5] y) {
            m = MatMul (x, w)
            h = Add (m, b)
            y = Mul (h, c)
        }""",
        w=rng().normal(size=(4, 5)).astype(np.float32),
        b=rng(1).normal(size=5).astype(np.float32),
        c=rng(2).normal(size=5).astype(np.float32),
    )
    rewritten, [result] = apply(model, fold_mul_into_weights)
    assert result.changed == 1 and ops(rewritten) == ["MatMul", "Add"]
    assert_same_outputs(model, rewritten)


def test_mul_declines_shared_weight():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3, 8, 8] x) => (float[2, 4, 8, 8] y, float[2, 4, 8, 8] z) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            z = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = Mul (h, c)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        c=rng(2).normal(size=(4, 1, 1)).astype(np.float32),
    )
    _, [result] = apply(model, fold_mul_into_weights)
    assert result.changed == 0 and "shared" in result.declined[0]


def test_mul_declines_non_constant_factor():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3, 8, 8] x, float[4, 1, 1] c) => (float[2, 4, 8, 8] y) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = Mul (h, c)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
    )
    _, [result] = apply(model, fold_mul_into_weights)
    assert result.changed == 0
