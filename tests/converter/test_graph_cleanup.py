"""infer_shapes, constants_to_initializers, remove_identity, fold_constants, remove_unused, fp16."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from passtools import apply, assert_same_outputs, make_model, ops, rng

from converter.passes import (
    constants_to_initializers,
    fold_constants,
    infer_shapes,
    remove_identity,
    remove_unused,
    run_passes,
    store_weights_fp16,
)
from converter.passes.base import PassContext

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def test_infer_shapes_fills_intermediate_values():
    model = make_model(f"""{HEADER}
        g (float[2, 3] x) => (float[3, 2] y) {{ t = Relu (x)\n y = Transpose (t) }}""")
    graph = ir.serde.deserialize_model(model)
    [result] = run_passes(graph, (infer_shapes,))
    assert result.changed == 1  # y's shape was declared; t's is new
    relu = next(iter(graph.graph))
    assert list(relu.outputs[0].shape) == [2, 3]


def test_constant_nodes_become_initializers():
    model = make_model(f"""{HEADER}
        g (float[3] x) => (float[3] y) {{
            a = Constant <value_floats: floats = [1.0, 2.0, 3.0]> ()
            b = Constant <value: tensor = float[3] {{4.0, 5.0, 6.0}}> ()
            s = Mul (x, a)
            y = Add (s, b)
        }}""")
    rewritten, [result] = apply(model, constants_to_initializers)
    assert result.changed == 2
    assert ops(rewritten) == ["Mul", "Add"]
    assert {i.name for i in rewritten.graph.initializer} == {"a", "b"}
    assert_same_outputs(model, rewritten)


def test_identity_and_inference_dropout_are_removed():
    model = make_model(f"""{HEADER}
        g (float[3] x) => (float[3] y) {{
            a = Relu (x)
            b = Identity (a)
            c = Dropout (b)
            y = Identity (c)
        }}""")
    rewritten, [result] = apply(model, remove_identity)
    assert result.changed == 3
    assert ops(rewritten) == ["Relu"]
    assert rewritten.graph.output[0].name == "y"  # the interface keeps its names
    assert_same_outputs(model, rewritten)


def test_identity_declines():
    model = make_model(f"""{HEADER}
        g (float[3] x, bool t) => (float[3] y, float[3] z, bool[3] m) {{
            y = Identity (x)
            a = Relu (x)
            z, m = Dropout (a)
        }}""")
    _, [result] = apply(model, remove_identity)
    assert result.changed == 0
    reasons = " | ".join(result.declined)
    assert "interface needs a node" in reasons and "mask output is read" in reasons


def test_dropout_in_training_mode_is_kept():
    model = make_model(f"""{HEADER}
        g (float[3] x) => (float[3] y) {{ y = Dropout (x, ratio, mode) }}""",
        ratio=np.array(0.5, np.float32),
        mode=np.array(True),
    )
    _, [result] = apply(model, remove_identity)
    assert result.changed == 0 and "training_mode is true" in result.declined[0]


def test_shape_expand_bias_chain_folds():
    # The dynamo exporter's Conv bias with optimize=False.
    model = make_model(f"""{HEADER}
        g (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y) {{
            d = Shape <start: int = 0, end: int = 1> (w)
            one = Constant <value_ints: ints = [1]> ()
            s = Expand (d, one)
            zero = Constant <value: tensor = float {{0.0}}> ()
            z = CastLike (zero, x)
            b = Expand (z, s)
            y = Conv <pads: ints = [1, 1, 1, 1]> (x, w, b)
        }}""", w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32))
    rewritten, results = apply(model, constants_to_initializers, fold_constants, remove_unused)
    assert results[1].changed == 4
    assert ops(rewritten) == ["Conv"]
    assert_same_outputs(model, rewritten)


def test_gather_of_static_dim_folds_under_dynamic_batch():
    model = make_model(f"""{HEADER}
        g (float[N, 6] x) => (float[N, 2, 3] y) {{
            s = Shape (x)
            k = Gather <axis: int = 0> (s, idx)
            n = Gather <axis: int = 0> (s, zero)
            k3 = Div (k, two)
            nn = Unsqueeze (n, axes)
            kk = Unsqueeze (k3, axes)
            shape = Concat <axis: int = 0> (nn, two1, kk)
            y = Reshape (x, shape)
        }}""",
        idx=np.array(1, np.int64),
        zero=np.array(0, np.int64),
        two=np.array(2, np.int64),
        two1=np.array([2], np.int64),
        axes=np.array([0], np.int64),
    )
    rewritten, [result] = apply(model, fold_constants)
    assert result.counts["Gather"] == 1  # the static dim; the batch dim stays dynamic
    assert result.counts["Div"] == 1 and result.counts["Unsqueeze"] == 1
    assert "Shape" in ops(rewritten)
    assert_same_outputs(model, rewritten)


def test_fold_declines_random_and_huge_results():
    model = make_model(f"""{HEADER}
        g (float[2] x) => (float[2] y, float[1000, 1000] big) {{
            r = RandomNormalLike (x)
            y = Add (x, r)
            big = ConstantOfShape (shape)
        }}""", shape=np.array([1000, 1000], np.int64))
    _, [result] = apply(model, fold_constants)
    assert result.changed == 0
    assert any("larger weight" in reason for reason in result.declined)


def test_dead_nodes_and_unused_initializers_are_removed():
    model = make_model(f"""{HEADER}
        g (float[3] x) => (float[3] y) {{
            a = Mul (x, w)
            b = Neg (a)
            y = Relu (x)
        }}""", w=np.ones(3, np.float32), unused=np.ones(3, np.float32))
    rewritten, [result] = apply(model, remove_unused)
    assert result.counts["nodes"] == 2 and result.counts["initializers"] == 2
    assert ops(rewritten) == ["Relu"] and not rewritten.graph.initializer


@pytest.mark.parametrize("fp16_io", [False, True])
def test_fp16_weights_keep_the_graph_valid(fp16_io):
    model = make_model(f"""{HEADER}
        g (float[2, 4] x) => (float[2, 20] y) {{ y = Gemm (x, w, b) }}""",
        w=rng().normal(size=(4, 20)).astype(np.float32),
        b=rng(1).normal(size=20).astype(np.float32),
    )
    graph = ir.serde.deserialize_model(model)

    def half(model, context):
        return store_weights_fp16(model, context, fp16_io=fp16_io)

    [result] = run_passes(graph, (half,), PassContext())
    assert result.counts["weights"] == 2
    assert all(v.dtype == ir.DataType.FLOAT16 for v in graph.graph.initializers.values())
    from converter.onnx_export import to_onnx
    from converter.reference_session import run_onnxruntime
    from converter.verify import random_inputs

    exported = to_onnx(graph)
    feeds = random_inputs(model)
    expected = run_onnxruntime(model, feeds)["y"]
    got = run_onnxruntime(exported, {k: v.astype(np.float16) if fp16_io else v for k, v in feeds.items()})["y"]
    assert got.dtype == (np.float16 if fp16_io else np.float32)
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_fp16_weights_keep_infinities_and_clip_only_finite_values():
    """A scatter-max's -inf start value stays -inf in float16; 1e6 is clipped, and only it is counted."""
    model = make_model(f"""{HEADER}
        g (float[20] x) => (float[20] y) {{ y = Max (x, w) }}""",
        w=np.array([-np.inf, np.inf, 1e6, *[-1.5] * 17], np.float32))
    graph = ir.serde.deserialize_model(model)
    context = PassContext()
    run_passes(graph, (store_weights_fp16,), context)
    (half,) = graph.graph.initializers.values()
    np.testing.assert_array_equal(half.const_value.numpy(), np.array([-np.inf, np.inf, 65504, *[-1.5] * 17], np.float16))
    assert context.warnings == ["fp16: 1 values of 'w' exceed float16's range and were clipped"]


def test_fp16_weights_keep_quantization_scales_in_float32():
    """An activation scale rounded to float16 moves the int8 grid: inputs near a step's edge
    land one step away. The scales stay float32; the float weight beside them is halved."""
    scale = np.float32(0.0096145)  # 0.0096130... as float16: 1.5e-4 of a step apart
    model = make_model(f"""{HEADER}
        g (float[1, 4000] x) => (float[1, 4000] y) {{
            q = QuantizeLinear (x, s, zero)
            d = DequantizeLinear (q, s, zero)
            y = Mul (d, w)
        }}""",
        s=np.array(scale), zero=np.array(0, np.uint8), w=rng().normal(size=4000).astype(np.float32),
    )
    graph = ir.serde.deserialize_model(model)
    [result] = run_passes(graph, (store_weights_fp16,), PassContext())
    assert result.counts["weights"] == 1 and result.counts["quantization parameters kept"] == 1
    assert graph.graph.initializers["s"].dtype == ir.DataType.FLOAT
    from converter.onnx_export import to_onnx
    from converter.reference_session import run_onnxruntime

    x = {"x": np.linspace(0, 2.4, 4000, dtype=np.float32)[None]}  # every step's edge, crossed
    expected = run_onnxruntime(model, x)["y"]
    got = run_onnxruntime(to_onnx(graph), x)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-6)


def test_nodes_that_return_their_input_unchanged_are_bypassed():
    model = make_model(f"""{HEADER}
        g (float[1, 3, 4] x) => (float[1, 3, 4] y) {{
            a = Relu (x)
            b = Pad (a, zeros)
            c = Transpose <perm: ints = [0, 1, 2]> (b)
            d = Cast <to: int = 1> (c)
            e = Concat <axis: int = 1> (d)
            f = Reshape (e, same)
            g = Expand (f, same)
            h = Tile (g, ones)
            y = Sigmoid (h)
        }}""",
        zeros=np.zeros(6, np.int64), same=np.array([1, 3, 4], np.int64), ones=np.ones(3, np.int64),
    )
    rewritten, [result] = apply(model, remove_identity)
    assert result.changed == 7, result.details
    assert ops(rewritten) == ["Relu", "Sigmoid"]
    assert_same_outputs(model, rewritten)


def test_nodes_that_change_their_input_are_kept():
    model = make_model(f"""{HEADER}
        g (float[2, 3] x) => (float[3, 2] y, int64[4, 3] z, float[2, 3] w) {{
            a = Pad (x, pads)
            b = Slice (a, starts, ends)
            y = Transpose <perm: ints = [1, 0]> (x)
            c = Cast <to: int = 7> (x)
            z = Concat <axis: int = 0> (c, c)
            w = Identity (b)
        }}""",
        pads=np.array([0, 1, 0, 0], np.int64), starts=np.array([0, 1], np.int64), ends=np.array([2, 4], np.int64),
    )
    rewritten, [result] = apply(model, remove_identity)
    assert result.changed == 1  # only the Identity
    assert ops(rewritten) == ["Pad", "Slice", "Transpose", "Cast", "Concat"]


def test_a_pad_whose_amounts_fold_to_zeros_is_bypassed_by_default():
    """Swin's window padding: the amounts come from the feature map's size, zero where it divides."""
    model = make_model(f"""{HEADER}
        g (float[1, 8, 8, 4] x) => (float[1, 8, 8, 4] y) {{
            s = Shape (x)
            h = Gather <axis: int = 0> (s, one)
            r = Mod (h, window)
            q = Sub (window, r)
            p = Mod (q, window)
            pads = Concat <axis: int = 0> (head, p, tail)
            padded = Pad (x, pads)
            y = Relu (padded)
        }}""",
        one=np.array([1], np.int64), window=np.array([4], np.int64), head=np.zeros(4, np.int64),
        tail=np.zeros(3, np.int64),
    )
    from converter.passes import DEFAULT_PASSES

    graph = ir.serde.deserialize_model(model)
    run_passes(graph, DEFAULT_PASSES)
    assert [node.op_type for node in graph.graph] == ["Relu"]
