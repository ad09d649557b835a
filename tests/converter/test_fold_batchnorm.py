"""fold_batchnorm and batchnorm_to_scale_shift: positive cases (count + numerics), negative cases
(count == 0 with the reason)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper
from passtools import apply, assert_same_outputs, bn_params, make_model, ops, rng

from converter.passes import batchnorm_to_scale_shift, fold_batchnorm, run_passes

BN = "y = BatchNormalization <epsilon: float = 0.001> (h, gamma, beta, mean, var)"


def _conv(bias: bool, extra: str = "") -> str:
    conv = "h = Conv <pads: ints = [1, 1, 1, 1]> (x, w, b)" if bias else "h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)"
    return f"""<ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3, 8, 8] x) => (float[2, 4, 8, 8] y{extra}) {{
        {conv}
        {BN}
    }}"""


@pytest.mark.parametrize("bias", [False, True])
def test_conv_batchnorm_folds(bias):
    weights = {"w": rng().normal(size=(4, 3, 3, 3)).astype(np.float32), **bn_params(4)}
    if bias:
        weights["b"] = rng(1).normal(size=4).astype(np.float32)
    model = make_model(_conv(bias), **weights)
    rewritten, [result] = apply(model, fold_batchnorm)
    assert result.changed == 1
    assert ops(rewritten) == ["Conv"]
    assert_same_outputs(model, rewritten)


def test_conv_transpose_with_groups_folds():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 4, 5, 5] x) => (float[1, 6, 7, 7] y) {
            h = ConvTranspose <group: int = 2> (x, w)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        **bn_params(6),
    )
    rewritten, [result] = apply(model, fold_batchnorm)
    assert result.changed == 1 and ops(rewritten) == ["ConvTranspose"]
    assert_same_outputs(model, rewritten)


@pytest.mark.parametrize("trans_b, beta", [(1, 1.0), (0, 0.5), (0, 0.0)])
def test_gemm_batchnorm_over_features_folds(trans_b, beta):
    b_shape = (5, 4) if trans_b else (4, 5)
    model = make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 4] x) => (float[3, 5] y) {{
            h = Gemm <transB: int = {trans_b}, beta: float = {beta}> (x, w, c)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }}""",
        w=rng().normal(size=b_shape).astype(np.float32),
        c=rng(2).normal(size=5).astype(np.float32),
        **bn_params(5),
    )
    rewritten, [result] = apply(model, fold_batchnorm)
    assert result.changed == 1 and ops(rewritten) == ["Gemm"]
    assert_same_outputs(model, rewritten)


@pytest.mark.parametrize("with_add", [True, False])
def test_dense_matmul_add_then_2d_batchnorm_folds(with_add):
    body = "m = MatMul (x, w)\n h = Add (m, b)" if with_add else "h = MatMul (x, w)"
    model = make_model(
        f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x) => (float[N, 5] y) {{
            {body}
            y = BatchNormalization (h, gamma, beta, mean, var)
        }}""",
        w=rng().normal(size=(4, 5)).astype(np.float32),
        **({"b": rng(3).normal(size=5).astype(np.float32)} if with_add else {}),
        **bn_params(5),
    )
    rewritten, [result] = apply(model, fold_batchnorm)
    assert result.changed == 1
    assert ops(rewritten) == ["MatMul", "Add"]
    assert_same_outputs(model, rewritten)


def _declined(model, pass_=fold_batchnorm):
    _, [result] = apply(model, pass_)
    assert result.changed == 0
    assert len(result.declined) == 1
    return result.declined[0]


def test_declines_when_conv_output_is_read_elsewhere():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y, float[1, 4, 8, 8] h) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        **bn_params(4),
    )
    assert "also read elsewhere" in _declined(model)


def test_declines_when_weight_is_a_graph_input():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x, float[4, 3, 3, 3] w) => (float[1, 4, 8, 8] y) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        **bn_params(4),
    )
    _, [result] = apply(model, fold_batchnorm)
    # The weight is not a constant, so the layer is not even a fold candidate.
    assert result.changed == 0


def test_declines_when_weight_is_shared():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y, float[1, 4, 8, 8] z) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            z = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        **bn_params(4),
    )
    assert "shared with 1 other node" in _declined(model)


def test_declines_in_training_mode():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y, float[4] m, float[4] v) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y, m, v = BatchNormalization <training_mode: int = 1> (h, gamma, beta, mean, var)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        **bn_params(4),
    )
    assert "training_mode" in _declined(model)


def test_declines_matmul_whose_output_is_not_2d():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 5, 4] x) => (float[2, 5, 5] y) {
            h = MatMul (x, w)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        w=rng().normal(size=(4, 5)).astype(np.float32),
        **bn_params(5),
    )
    assert "rank 3" in _declined(model)


def test_declines_when_statistics_are_inputs():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x, float[4] mean) => (float[1, 4, 8, 8] y) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        gamma=np.ones(4, np.float32),
        beta=np.zeros(4, np.float32),
        var=np.ones(4, np.float32),
    )
    assert "not all constants" in _declined(model)


def test_leftover_batchnorm_becomes_mul_add():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4, 6, 6] a, float[2, 4, 6, 6] b) => (float[2, 4, 6, 6] y) {
            h = Add (a, b)
            y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        **bn_params(4),
    )
    _, [folded] = apply(model, fold_batchnorm)
    assert folded.changed == 0  # nothing to fold into: the pattern does not match
    rewritten, [result] = apply(model, batchnorm_to_scale_shift)
    assert result.changed == 1
    assert ops(rewritten) == ["Add", "Mul", "Add"]
    assert_same_outputs(model, rewritten)


def test_scale_shift_declines_without_rank():
    # The input comes from a custom op that shape inference cannot see through: rank unknown.
    nodes = [
        helper.make_node("Custom", ["a"], ["h"], domain="com.example"),
        helper.make_node("BatchNormalization", ["h", "gamma", "beta", "mean", "var"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 4, 6, 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in bn_params(4).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    [result] = run_passes(ir.serde.deserialize_model(model), (batchnorm_to_scale_shift,))
    assert result.changed == 0
    assert "rank" in result.declined[0]


def test_scale_shift_nodes_avoid_the_names_of_the_models_nodes():
    """ONNX Runtime refuses a graph that names two nodes alike: the new Mul is not 'bn_mul' here."""
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4, 6, 6] a, float[2, 4, 6, 6] b) => (float[2, 4, 6, 6] y) {
            [bn_mul] h = Add (a, b)
            [bn] y = BatchNormalization (h, gamma, beta, mean, var)
        }""",
        **bn_params(4),
    )
    rewritten, [result] = apply(model, batchnorm_to_scale_shift)
    assert result.changed == 1
    names = [node.name for node in rewritten.graph.node]
    assert names[0] == "bn_mul" and len(set(names)) == len(names) == 3, names
    assert_same_outputs(model, rewritten)
