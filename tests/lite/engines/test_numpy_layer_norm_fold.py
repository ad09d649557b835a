"""The numpy engine's LayerNormalization fold (lite.engines.numpy_layer_norm_fold): which norms give
their scale and shift to the linear layers reading them, and that the folded steps compute what
the nodes compute."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_layer_norm_fold import UnitLayerNorm
from lite.format import GraphBuilder, load, to_bytes
from lite.format.values import tensor_value
from tests.lite.engines.fusion_tools import bind_node

WIDTH = 12


def norm_model(*, shift=True, zero_shift=False, bias=(True, True), other_reader=False, shared_weights=False,
               axis=-1, norm_output=False, residual=False):
    """x (N, T, 12) [+ x] -> LayerNormalization(γ, β) -> two MatMuls (12x20, 12x8), each [+ bias] -> y0, y1."""
    rng = np.random.default_rng(21)
    b = GraphBuilder("fold", opset=17)
    x = b.input("x", np.float32, ["N", "T", WIDTH])
    if residual:
        x = b.node("Add", [x, b.node("Relu", [x])])
    parameters = [x, b.constant("gamma", rng.standard_normal(WIDTH).astype(np.float32))]
    if shift:
        beta = np.zeros(WIDTH, np.float32) if zero_shift else rng.standard_normal(WIDTH).astype(np.float32)
        parameters.append(b.constant("beta", beta))
    normalized = b.node("LayerNormalization", parameters, outputs=["normalized"], epsilon=1e-5, axis=axis)
    first_weights = b.constant("w0", rng.standard_normal((WIDTH, 20)).astype(np.float32))
    second_weights = first_weights if shared_weights else b.constant(
        "w1", rng.standard_normal((WIDTH, 8)).astype(np.float32))
    for index, weights in enumerate([first_weights, second_weights]):
        product = b.node("MatMul", [normalized, weights])
        if bias[index]:
            size = 20 if index == 0 or shared_weights else 8
            product = b.node("Add", [product, b.constant(f"c{index}", rng.standard_normal(size).astype(np.float32))])
        b.output(b.node("Identity", [product], outputs=[f"y{index}"]), np.float32, None)
    if other_reader:
        b.output(b.node("Relu", [normalized], outputs=["relu"]), np.float32, None)
    if norm_output:
        b.output(normalized, np.float32, None)
    return load(to_bytes(b.build()))


def node_by_node(model, inputs: dict) -> dict:
    """The graph's outputs with each node run by its own kernel on the file's constants (the
    engine's constants are the folded ones)."""
    engine = NumpyEngine(model)
    graph = engine.plans[0].graph
    values = {index: tensor_value(tensor) for index, tensor in enumerate(graph.tensors) if tensor.is_constant}
    values.update((index, inputs[graph.tensors[index].name]) for index in graph.inputs)
    for node in model.main.nodes:
        step = bind_node(engine, node)
        result = step.fn(*[values.get(i) if i >= 0 else None for i in step.inputs], **step.keywords)
        values.update(zip(node.outputs, result if type(result) is tuple else (result,)))
    return {graph.tensors[i].name: values[i] for i in graph.outputs}


def folded(engine: NumpyEngine) -> list:
    """The steps computing a folded norm (on its own, or inside the residual Add's fused step)."""
    return [step for step in engine.plans[0].steps
            if isinstance(step.fn, UnitLayerNorm) or isinstance(getattr(step.fn, "norm", None), UnitLayerNorm)]


def transposed_kernel(step):
    """The step's TransposedInputLayerNorm: its kernel, or the kernel a per-shape LayerNorm
    step (lite.engines.numpy_norms.ConstantLayerNorm) falls back to for other inputs; else None."""
    fn = step.fn
    while fn is not None and type(fn).__name__ != "TransposedInputLayerNorm":
        fn = getattr(fn, "kernel", None)
    return fn


def check_against_nodes(model, engine, shapes, rtol=2e-5, atol=2e-5):
    rng = np.random.default_rng(22)
    for shape in shapes:
        inputs = {"x": (rng.standard_normal(shape) * 3 + 1).astype(np.float32)}
        expected = node_by_node(model, inputs)
        got = engine.run(inputs)
        assert set(got) == set(expected)
        for name, value in got.items():
            np.testing.assert_allclose(value, expected[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("options", [{}, {"shift": False}, {"zero_shift": True}, {"zero_shift": True, "bias": (False, True)},
                                     {"residual": True}],
                         ids=["γ and β", "no β", "β zero", "β zero, a MatMul without bias", "after a residual Add"])
def test_a_layer_norm_read_by_linear_layers_gives_them_its_scale_and_shift(options):
    model = norm_model(**options)
    engine = NumpyEngine(model)
    assert len(folded(engine)) == 1
    check_against_nodes(model, engine, [(2, 5, WIDTH), (1, 1, WIDTH), (3, 7, WIDTH)])


@pytest.mark.parametrize("options", [
    {"bias": (True, False)}, {"other_reader": True}, {"shared_weights": True}, {"axis": 1}, {"norm_output": True},
], ids=["β and a MatMul without bias", "another reader", "weights read twice", "another axis", "graph output"])
def test_a_layer_norm_that_cannot_fold_stays_as_it_is(options):
    model = norm_model(**options)
    engine = NumpyEngine(model)
    assert not folded(engine)
    check_against_nodes(model, engine, [(2, 5, WIDTH)])


def test_the_unit_norm_matches_the_kernel_with_unit_scale():
    from lite.ops.layer_normalization import LayerNormalization

    norm = UnitLayerNorm(LayerNormalization, WIDTH, 1e-5)
    rng = np.random.default_rng(23)
    ones = np.ones(WIDTH, np.float32)
    contiguous = rng.standard_normal((4, 3, WIDTH)).astype(np.float32)
    np.testing.assert_allclose(norm(contiguous), LayerNormalization(contiguous, ones, output_count=1),
                               rtol=1e-6, atol=1e-6)
    for shape in [(3, WIDTH, 4), (WIDTH, 1), (2, 2, WIDTH, 5)]:  # channels then positions, viewed transposed
        transposed = (rng.standard_normal(shape) * 4 + 3).astype(np.float32).swapaxes(-1, -2)
        np.testing.assert_allclose(norm(transposed), LayerNormalization(transposed, ones, output_count=1),
                                   rtol=1e-5, atol=1e-5)
    strided = rng.standard_normal((3, WIDTH, 8)).astype(np.float32)[:, :, ::2].swapaxes(-1, -2)
    np.testing.assert_array_equal(norm(strided), LayerNormalization(strided, ones, output_count=1))
    double = rng.standard_normal((2, WIDTH))
    np.testing.assert_array_equal(norm(double), LayerNormalization(double, ones, output_count=1))


def transposed_norm_model(*, axis=-1, shift=True):
    """x (N, 12, T) -> Transpose(0, 2, 1) -> LayerNormalization(γ, β) -> y, -> Relu -> r: a
    convolution's output taken as tokens, normalized and read by a layer that is not linear."""
    rng = np.random.default_rng(24)
    b = GraphBuilder("transposed", opset=17)
    x = b.input("x", np.float32, ["N", WIDTH, "T"])
    tokens = b.node("Transpose", [x], perm=[0, 2, 1])
    parameters = [tokens, b.constant("gamma", rng.standard_normal(WIDTH).astype(np.float32))]
    if shift:
        parameters.append(b.constant("beta", rng.standard_normal(WIDTH).astype(np.float32)))
    normalized = b.node("LayerNormalization", parameters, outputs=["y"], epsilon=1e-5, axis=axis)
    b.output(normalized, np.float32, None)
    b.output(b.node("Relu", [normalized], outputs=["r"]), np.float32, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("shift", [True, False], ids=["γ and β", "no β"])
def test_a_layer_norm_of_a_transposed_input_normalizes_its_columns(shift):
    model = transposed_norm_model(shift=shift)
    engine = NumpyEngine(model)
    (norm,) = [step for step in engine.plans[0].steps if transposed_kernel(step) is not None]
    assert not folded(engine)
    check_against_nodes(model, engine, [(2, WIDTH, 5), (1, WIDTH, 1), (1, WIDTH, 37)])
    rng = np.random.default_rng(25)
    parameters = [engine.plans[0].constants[index] for index in norm.inputs[1:]]
    contiguous = rng.standard_normal((2, 3, WIDTH)).astype(np.float32)
    keywords = getattr(norm.fn, "keywords", None) or norm.keywords  # a per-shape step keeps the node's
    np.testing.assert_array_equal(norm.fn(contiguous, *parameters, **norm.keywords),
                                  transposed_kernel(norm).kernel(contiguous, *parameters, **keywords))


def test_a_layer_norm_over_another_axis_keeps_its_kernel():
    engine = NumpyEngine(transposed_norm_model(axis=1))
    assert all(transposed_kernel(step) is None for step in engine.plans[0].steps)
