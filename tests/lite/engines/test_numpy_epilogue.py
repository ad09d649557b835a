"""The numpy engine's product epilogue fusion (lite.engines.numpy_epilogue): a MatMul or Gemm and
the nodes its result alone goes through as one step, computing what the nodes compute."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_epilogue import ProductEpilogue
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node

WIDTH = 6


def linear_bn_model(*, gemm=False, scale_output=False, subtract_from=False, transpose=False):
    """x (N*T, 8) or (N, T, 8) -> MatMul/Gemm -> Reshape -> Mul(s) -> Add(t) -> Reshape -> Add(r) -> Sub -> y:
    LeViT's linear layer with its batch norm folded, then a residual."""
    rng = np.random.default_rng(20)
    b = GraphBuilder("linear_bn", opset=13)
    x = b.input("x", np.float32, ["M", 8] if gemm else ["N", "T", 8])
    residual = b.input("r", np.float32, ["N", "T", WIDTH])
    w = b.constant("w", rng.standard_normal((WIDTH, 8) if gemm else (8, WIDTH)).astype(np.float32))
    product = b.node("Gemm", [x, w], transB=1) if gemm else b.node("MatMul", [x, w])
    flat = b.node("Reshape", [product, b.constant("flat", np.array([-1, WIDTH], np.int64))])
    scaled = b.node("Mul", [b.constant("s", rng.standard_normal(WIDTH).astype(np.float32)), flat],
                    outputs=["scaled"])
    shifted = b.node("Add", [scaled, b.constant("t", rng.standard_normal(WIDTH).astype(np.float32))])
    tokens = b.node("Reshape", [shifted, b.constant("tokens", np.array([-1, 3, WIDTH], np.int64))])
    if transpose:
        tokens = b.node("Transpose", [b.node("Transpose", [tokens], perm=[0, 2, 1])], perm=[0, 2, 1])
    total = b.node("Add", [residual, tokens])
    offset = b.constant("u", np.array(0.5, np.float32))
    y = b.node("Sub", [offset, total] if subtract_from else [total, offset], outputs=["y"])
    b.output(y, np.float32, None)
    if scale_output:
        b.output(scaled, np.float32, None)
    return load(to_bytes(b.build()))


def feeds(gemm, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch * 3, 8) if gemm else (batch, 3, 8)).astype(np.float32)
    return {"x": x, "r": rng.standard_normal((batch, 3, WIDTH)).astype(np.float32)}


def epilogues(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, ProductEpilogue)]


@pytest.mark.parametrize("options", [{}, {"gemm": True}, {"transpose": True}], ids=["MatMul", "Gemm", "transposes"])
def test_a_product_and_its_epilogue_are_one_step(options):
    model = linear_bn_model(**options)
    engine = NumpyEngine(model)
    assert len(epilogues(engine)) == 1
    assert len(engine.plans[0].steps) == 1
    for batch in (2, 1, 2):
        inputs = feeds(options.get("gemm", False), batch, seed=batch)
        got = engine.run(inputs)["y"]
        plan = engine.plans[0]
        w, s, t = (plan.constants[plan.index_of[name]] for name in "wst")
        x = inputs["x"].reshape(-1, 8).astype(np.float64)
        product = x @ (w.T if options.get("gemm") else w)
        expected = inputs["r"] + (product * s + t).reshape(-1, 3, WIDTH) - 0.5
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        # The same numpy operations in the same order as the nodes' kernels: the same float32 values.
        np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])


def test_the_epilogue_stops_where_a_value_is_read_elsewhere_or_the_product_is_on_the_right():
    for options, fused_nodes in [({"scale_output": True}, 3), ({"subtract_from": True}, 6)]:
        model = linear_bn_model(**options)
        engine = NumpyEngine(model)
        (step,) = epilogues(engine)
        assert len(engine.plans[0].steps) == len(model.main.nodes) - fused_nodes + 1
        inputs = feeds(False)
        expected = node_by_node(model, inputs)
        for name, value in engine.run(inputs).items():
            np.testing.assert_array_equal(value, expected[name])


def test_operands_the_step_does_not_write_in_place_go_through_the_kernels():
    """A float64 residual, the Add's first operand: numpy's promotion, then that operand's type,
    as the Add kernel computes it."""
    model = linear_bn_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    inputs = feeds(False)
    inputs["r"] = inputs["r"].astype(np.float64)
    args = [inputs["x"] if i == engine.plans[0].index_of["x"] else inputs["r"] if i == engine.plans[0].index_of["r"]
            else engine.plans[0].constants[i] for i in step.inputs]
    got = step.fn(*args)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])


def test_a_planned_step_runs_the_kernels_for_inputs_other_than_those_it_was_planned_for():
    """The first call for an input shape plans the step (constants known by identity, computed
    inputs by type and shape); inputs unlike those run through the checked path, with the
    kernels' values: another residual type or shape, a computed copy of a shape tensor, another
    input type."""
    model = linear_bn_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    plan, index_of = engine.plans[0], engine.plans[0].index_of

    def arguments(inputs, copies=()):
        return [inputs["x"] if i == index_of["x"] else inputs["r"] if i == index_of["r"]
                else plan.constants[i].copy() if i in copies else plan.constants[i] for i in step.inputs]

    inputs = feeds(False)
    np.testing.assert_array_equal(engine.run(inputs)["y"], node_by_node(model, inputs)["y"])
    assert step.fn.plans[inputs["x"].shape] is not None
    planned = engine.run(inputs)["y"]
    np.testing.assert_array_equal(planned, node_by_node(model, inputs)["y"])
    other_type = dict(inputs, r=inputs["r"].astype(np.float64))
    broadcast = dict(inputs, r=inputs["r"][:1])
    for case in (other_type, broadcast):
        got = step.fn(*arguments(case))
        np.testing.assert_array_equal(got, node_by_node(model, case)["y"])
        assert got.dtype == node_by_node(model, case)["y"].dtype
    shape_input = index_of["tokens"]
    np.testing.assert_array_equal(step.fn(*arguments(inputs, copies={shape_input})), planned)
    wide = {name: value.astype(np.float64) for name, value in inputs.items()}
    np.testing.assert_array_equal(step.fn(*arguments(wide)), node_by_node(model, wide)["y"])


def test_a_computed_shape_tensor_is_not_planned():
    model = linear_bn_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    plan, index_of = engine.plans[0], engine.plans[0].index_of
    inputs = feeds(False)
    args = [inputs["x"] if i == index_of["x"] else inputs["r"] if i == index_of["r"]
            else plan.constants[i].copy() if i == index_of["tokens"] else plan.constants[i] for i in step.inputs]
    for _ in range(2):
        np.testing.assert_array_equal(step.fn(*args), node_by_node(model, inputs)["y"])
    assert step.fn.plans[inputs["x"].shape] is None


def test_a_fused_convolution_with_its_residual_is_not_taken_for_an_add():
    """MatMul -> 1x1 Conv -> Add(·, x) (YOLO's PSA attention: attn @ v, the projection, the
    residual): the convolution chain fused into the Add keeps the Add's node, and the epilogue
    folded it in as a plain Add, dropping the convolution."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv_residual", opset=17)
    x = b.input("x", np.float32, [1, 8, 4, 4])
    product = b.node("MatMul", [x, b.constant("wm", rng.standard_normal((4, 4)).astype(np.float32))])
    conv = b.node("Conv", [product, b.constant("wc", rng.standard_normal((8, 8, 1, 1)).astype(np.float32)),
                           b.constant("bc", rng.standard_normal(8).astype(np.float32))])
    b.output(b.node("Add", [conv, x], outputs=["y"]), np.float32, None)
    model = load(to_bytes(b.build()))
    inputs = {"x": rng.standard_normal((1, 8, 4, 4)).astype(np.float32)}
    np.testing.assert_allclose(NumpyEngine(model).run(inputs)["y"], node_by_node(model, inputs)["y"], rtol=1e-5, atol=1e-5)
