"""The numpy engine's planning: constants as kernels see them."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from lite.format.values import attribute_value, tensor_value
from lite.ops import _depthwise
from tests.lite.engines.fusion_tools import bind_node


def depthwise_model():
    weights = np.random.default_rng(4)
    b = GraphBuilder("depthwise", opset=13)
    x = b.input("x", np.float32, ["N", 8, 6, 6])
    w = b.constant("w", weights.standard_normal((8, 1, 3, 3)).astype(np.float32))
    bias = b.constant("b", weights.standard_normal(8).astype(np.float32))
    steps = b.constant("steps", np.arange(3, dtype=np.int64))
    y = b.node("Conv", [x, w, bias], group=8, pads=[1, 1, 1, 1])
    b.output(b.node("Add", [y, b.node("Cast", [b.node("ReduceSum", [steps])], to=1)], outputs=["y"]),
             np.float32, ["N", 8, 6, 6])
    return load(to_bytes(b.build()))


def test_constants_carry_numpys_own_dtypes():
    """The reader's little-endian dtypes equal the native ones but are other objects; numpy then
    answers np.asarray(w, dtype=np.float32) with a new view on every call."""
    engine = NumpyEngine(depthwise_model())
    arrays = [value for value in engine.plans[0].constants.values() if isinstance(value, np.ndarray)]
    assert arrays
    for value in arrays:
        assert value.dtype.isbuiltin
        assert np.asarray(value, dtype=value.dtype.type) is value


def test_depthwise_weights_are_laid_out_once_over_many_runs(monkeypatch):
    laid_out = []
    original = _depthwise._Geometry.lay_out

    def counting(self, w):
        laid_out.append(w.shape)
        return original(self, w)

    monkeypatch.setattr(_depthwise._Geometry, "lay_out", counting)
    _depthwise._geometry.cache_clear()
    engine = NumpyEngine(depthwise_model())
    x = np.random.default_rng(5).standard_normal((1, 8, 6, 6)).astype(np.float32)
    first = engine.run({"x": x})["y"]
    for _ in range(3):
        np.testing.assert_array_equal(engine.run({"x": x})["y"], first)
    assert len(laid_out) == 1


def linear_model():
    weights = np.random.default_rng(6)
    b = GraphBuilder("linear", opset=13)
    x = b.input("x", np.float32, ["N", "T", 16])
    w = b.constant("w", weights.standard_normal((16, 24)).astype(np.float32))
    bias = b.constant("b", weights.standard_normal(24).astype(np.float32))
    b.output(b.node("Add", [b.node("MatMul", [x, w]), bias], outputs=["y"]), np.float32, ["N", "T", 24])
    return load(to_bytes(b.build()))


def test_a_linear_layer_is_one_step_for_every_input_shape():
    """MatMul by constant weights + constant bias: one step adding the bias in place, its full
    shape kept per product shape."""
    model = linear_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    constants = engine.plans[0].constants
    w, bias = constants[engine.plans[0].index_of["w"]], constants[engine.plans[0].index_of["b"]]
    rng = np.random.default_rng(7)
    for shape in [(1, 5, 16), (2, 3, 16), (1, 5, 16), (3, 700, 16)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = engine.run({"x": x})["y"]
        np.testing.assert_allclose(got, x @ w + bias, rtol=1e-5, atol=1e-5)
    assert len(step.fn.full) == 3


# -- squeeze-and-excitation -----------------------------------------------------------------------


def squeeze_excite_model(*, opset=18, depthwise=True, axes=(2, 3), gate_output=False, kernel=1, swap=False,
                         gate_activation=("Sigmoid", None)):
    """[depthwise conv ->] x -> ReduceMean -> Conv(Relu) -> Conv(Sigmoid) -> Mul(x, gate) -> y."""
    weights = np.random.default_rng(12)
    b = GraphBuilder("se", opset=opset)
    x = b.input("x", np.float32, ["N", 16, 6, 6])
    if depthwise:  # its output is channels-last (lite.ops._layout)
        w = b.constant("dw", weights.standard_normal((16, 1, 3, 3)).astype(np.float32))
        x = b.node("Conv", [x, w], group=16, pads=[1, 1, 1, 1])
    if opset >= 18:
        mean = b.node("ReduceMean", [x, b.constant("axes", np.array(axes, np.int64))], keepdims=1)
    else:
        mean = b.node("ReduceMean", [x], axes=list(axes), keepdims=1)
    w1 = b.constant("w1", weights.standard_normal((4, 16, kernel, kernel)).astype(np.float32))
    b1 = b.constant("b1", weights.standard_normal(4).astype(np.float32))
    w2 = b.constant("w2", weights.standard_normal((16, 4, 1, 1)).astype(np.float32))
    b2 = b.constant("b2", weights.standard_normal(16).astype(np.float32))
    pad = (kernel - 1) // 2
    hidden = b.node("Conv", [mean, w1, b1], fused_activation="Relu", pads=[pad] * 4)
    name, params = gate_activation
    extra = {} if params is None else {"fused_activation_params": list(params)}
    gate = b.node("Conv", [hidden, w2, b2], fused_activation=name, outputs=["gate"], **extra)
    b.output(b.node("Mul", [gate, x] if swap else [x, gate], outputs=["y"]), np.float32, None)
    if gate_output:
        b.output(gate, np.float32, ["N", 16, 1, 1])
    return load(to_bytes(b.build()))


def expected_squeeze_excite(engine, x):
    """The block node by node: each kernel on its own, no fusion."""
    plan = engine.plans[0]
    values = dict(plan.constants)
    values[plan.graph.inputs[0]] = x
    for node in engine.model.main.nodes:
        step = bind_node(engine, node)
        args = [values.get(i) if i >= 0 else None for i in step.inputs]
        result = step.fn(*args, **step.keywords)
        values[node.outputs[0]] = result[0] if type(result) is tuple else result
    return values[plan.index_of["y"]]


def fused_steps(engine):
    """The SqueezeExcite blocks: steps of their own, or in a convolution chain with the depthwise
    convolution before them (lite.engines.conv_chain)."""
    blocks = []
    for step in engine.plans[0].steps:
        members = step.fn.convs if type(step.fn).__name__ == "_ConvChain" else [step.fn]
        blocks.extend(member for member in members if type(member).__name__ == "SqueezeExcite")
    return blocks


@pytest.mark.parametrize("options", [{}, {"opset": 13}, {"depthwise": False}, {"axes": (-1, -2)}, {"swap": True},
                                     {"gate_activation": ("HardSigmoid", (1 / 6, 0.5))}],
                         ids=["opset 18", "axes attribute", "channels-first", "negative axes", "gate first",
                              "hard sigmoid gate"])
def test_a_squeeze_excite_block_is_one_step(options):
    engine = NumpyEngine(squeeze_excite_model(**options))
    assert len(fused_steps(engine)) == 1
    assert [step.node.op_type for step in engine.plans[0].steps] == ["Mul"]
    rng = np.random.default_rng(13)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 16, 6, 6)).astype(np.float32)
        got = engine.run({"x": x})["y"]
        np.testing.assert_allclose(got, expected_squeeze_excite(engine, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{"gate_output": True}, {"axes": (2,)}, {"kernel": 3}],
                         ids=["gate read elsewhere", "other axes", "3x3 convolution"])
def test_blocks_that_are_not_squeeze_excite_stay_as_they_are(options):
    engine = NumpyEngine(squeeze_excite_model(**options))
    assert not fused_steps(engine)
    x = np.random.default_rng(14).standard_normal((2, 16, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(engine.run({"x": x})["y"], expected_squeeze_excite(engine, x), rtol=1e-5, atol=1e-5)


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    engine = NumpyEngine(squeeze_excite_model(depthwise=False))
    (block,) = fused_steps(engine)
    x = np.random.default_rng(15).standard_normal((2, 16, 5, 7))
    np.testing.assert_allclose(block(x), expected_squeeze_excite(engine, x), rtol=1e-12)
    assert block(x).dtype == np.float64


def test_the_fused_step_follows_each_call_s_layout():
    """One block called on the same shape laid out channels-first, then channels-last, then
    channels-first again: each result in its input's layout and equal to the node-by-node one."""
    from lite.ops._layout import empty_channels_last, is_channels_last

    engine = NumpyEngine(squeeze_excite_model(depthwise=False))
    (block,) = fused_steps(engine)
    rng = np.random.default_rng(16)
    for channels_last in (False, True, False):
        x = rng.standard_normal((2, 16, 5, 7)).astype(np.float32)
        if channels_last:
            x_last = empty_channels_last(x.shape, x.dtype)
            x_last[...] = x
            x = x_last
        got = block(x)
        assert is_channels_last(got) == channels_last
        np.testing.assert_allclose(got, expected_squeeze_excite(engine, np.ascontiguousarray(x)), rtol=1e-5,
                                   atol=1e-5)


# -- projections of one input ---------------------------------------------------------------------


def projections_model():
    """x -> MatMul(Wq) + bq, MatMul(Wk) + bk, MatMul(Wv) (no bias) -> q, k, v."""
    weights = np.random.default_rng(16)
    b = GraphBuilder("qkv", opset=13)
    x = b.input("x", np.float32, ["N", "T", 16])
    for name, width, bias in (("q", 8, True), ("k", 8, True), ("v", 12, False)):
        w = b.constant(f"w{name}", weights.standard_normal((16, width)).astype(np.float32))
        product = b.node("MatMul", [x, w], outputs=[name] if not bias else 1)
        if bias:
            bias_name = b.constant(f"b{name}", weights.standard_normal(width).astype(np.float32))
            product = b.node("Add", [product, bias_name], outputs=[name])
        b.output(product, np.float32, None)
    return load(to_bytes(b.build()))


def test_projections_of_one_input_are_one_product():
    model = projections_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    assert len(step.outputs) == 3
    constants, index_of = engine.plans[0].constants, engine.plans[0].index_of
    rng = np.random.default_rng(17)
    for shape in [(1, 5, 16), (2, 3, 16)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = engine.run({"x": x})
        for name, bias in (("q", "bq"), ("k", "bk"), ("v", None)):
            expected = x @ constants[index_of[f"w{name}"]]
            if bias:
                expected = expected + constants[index_of[bias]]
            assert got[name].flags.c_contiguous
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)


def conv_chain_model(bias_input: bool = False):
    """Conv 3x3 (Clip) -> depthwise Conv (Relu) -> Conv 1x1, the last one's bias computed at run
    time when ``bias_input``."""
    weights = np.random.default_rng(8)
    b = GraphBuilder("conv_chain", opset=13)
    x = b.input("x", np.float32, ["N", 4, 9, 9])
    w1 = b.constant("w1", weights.standard_normal((8, 4, 3, 3)).astype(np.float32))
    b1 = b.constant("b1", weights.standard_normal(8).astype(np.float32))
    w2 = b.constant("w2", weights.standard_normal((8, 1, 3, 3)).astype(np.float32))
    w3 = b.constant("w3", weights.standard_normal((6, 8, 1, 1)).astype(np.float32))
    y = b.node("Conv", [x, w1, b1], pads=[1, 1, 1, 1], strides=[2, 2], fused_activation="Clip",
               fused_activation_params=[0.0, 6.0])
    y = b.node("Conv", [y, w2], group=8, pads=[1, 1, 1, 1], fused_activation="Relu")
    if bias_input:
        b3 = b.input("b3", np.float32, [6])
        b.output(b.node("Conv", [y, w3, b3], outputs=["y"]), np.float32, ["N", 6, 5, 5])
    else:
        b.output(b.node("Conv", [y, w3], outputs=["y"]), np.float32, ["N", 6, 5, 5])
    return load(to_bytes(b.build()))


def _reference_conv_chain(model, feeds):
    """The chain through the Conv kernel itself, keywords and all, nothing prepared."""
    from lite.ops import fused_activation
    from lite.ops.conv import Conv

    graph = model.main
    values = {graph.tensors[i].name: feeds[graph.tensors[i].name] for i in graph.inputs}
    for node in graph.nodes:
        args = [values.get(graph.tensors[i].name) if i >= 0 else None for i in node.inputs]
        args = [value if value is not None else tensor_value(graph.tensors[i])
                for value, i in zip(args, node.inputs)]
        attributes = {name: attribute_value(a) for name, a in node.attributes.items()
                      if name not in (fused_activation.ATTRIBUTE, fused_activation.PARAMS_ATTRIBUTE)}
        activation = None
        if fused_activation.ATTRIBUTE in node.attributes:
            params = node.attributes.get(fused_activation.PARAMS_ATTRIBUTE)
            activation = (attribute_value(node.attributes[fused_activation.ATTRIBUTE]),
                          tuple(attribute_value(params)) if params else ())
        values[graph.tensors[node.outputs[0]].name] = Conv(*args, fused_activation=activation, **attributes)
    return values["y"]


@pytest.mark.parametrize("batch", [1, 3])
def test_prepared_convolutions_run_bound_to_their_attributes(batch):
    model = conv_chain_model()
    engine = NumpyEngine(model)
    steps = engine.plans[0].steps
    # One step (lite.engines.conv_chain) running the three bound convolutions in turn.
    (step,) = steps
    assert step.node.op_type == "Conv" and step.keywords == {}
    assert [type(conv).__name__ for conv in step.fn.convs] == ["_Bound"] * 3
    x = np.random.default_rng(9).standard_normal((batch, 4, 9, 9)).astype(np.float32)
    expected = _reference_conv_chain(model, {"x": x})
    for _ in range(2):  # the second run reuses the layers the first built
        np.testing.assert_allclose(engine.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)
    # Another image size builds its own layers.
    x = np.ascontiguousarray(x[:, :, :7, :7])
    np.testing.assert_allclose(engine.run({"x": x})["y"], _reference_conv_chain(model, {"x": x}), rtol=1e-5, atol=1e-5)


def test_a_convolution_with_a_computed_bias_keeps_its_keywords():
    model = conv_chain_model(bias_input=True)
    engine = NumpyEngine(model)
    last = engine.plans[0].steps[-1]
    assert last.keywords and type(last.fn).__name__ != "_Bound"
    feeds = {"x": np.random.default_rng(10).standard_normal((2, 4, 9, 9)).astype(np.float32),
             "b3": np.arange(6, dtype=np.float32)}
    np.testing.assert_allclose(engine.run(feeds)["y"], _reference_conv_chain(model, feeds), rtol=1e-5, atol=1e-5)


def test_a_branch_prepares_the_weights_it_captures_from_the_enclosing_graph(tmp_path):
    # Exporters put a model's weights in the main graph and read them inside If branches by name
    # (silero's voice detector, one branch per sampling rate): prepared once, as in the main graph,
    # instead of a convolution layer built again on every call.
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    import converter

    rng = np.random.default_rng(11)
    weight = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)

    def branch(name, activation):
        conv = helper.make_node("Conv", ["x", "w"], [f"{name}_conv"], pads=[1, 1, 1, 1])
        act = helper.make_node(activation, [f"{name}_conv"], [f"{name}_y"])
        return helper.make_graph([conv, act], name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    node = helper.make_node("If", ["flag"], ["y"], then_branch=branch("then", "Relu"), else_branch=branch("else", "Sigmoid"))
    graph = helper.make_graph(
        [node], "outer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w")])
    source = tmp_path / "branches.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)
    target = tmp_path / "branches.lite"
    converter.convert(source, target, verify=False)
    engine = NumpyEngine(load(target.read_bytes()))
    convs = [step for plan in engine.plans[1:] for step in plan.steps if step.node.op_type == "Conv"]
    assert len(convs) == 2 and all(step.prepared is not None for step in convs)
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        for _ in range(2):
            np.testing.assert_allclose(engine.run(feeds)["y"], session.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


def _if_model(then_reads: str, tmp_path):
    """x @ W + b in the main graph (a MatMul and a bias Add, which the engine fuses), and an If
    whose branches read the product or the sum by name."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(12)

    def branch(name, source, op):
        return helper.make_graph([helper.make_node(op, [source], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    nodes = [helper.make_node("MatMul", ["x", "w"], ["product"]), helper.make_node("Add", ["product", "b"], ["sum"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=branch("then", then_reads, "Neg"),
                              else_branch=branch("else", "sum", "Relu"))]
    graph = helper.make_graph(
        nodes, "outer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8]), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")])
    path = tmp_path / f"if_{then_reads}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("then_reads", ["product", "sum"])
def test_fusions_in_a_graph_with_bodies_keep_what_the_bodies_read(then_reads, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import converter

    source = _if_model(then_reads, tmp_path)
    target = tmp_path / "if.lite"
    converter.convert(source, target, verify=False)
    engine = NumpyEngine(load(target.read_bytes()))
    main = [step.node.op_type for step in engine.plans[0].steps]
    # The product read by a branch stays a value of its own; read by nothing else, it is fused.
    assert main == (["MatMul", "Add", "If"] if then_reads == "product" else ["MatMul", "If"])
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(13).standard_normal((3, 8)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        np.testing.assert_allclose(engine.run(feeds)["y"], session.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
