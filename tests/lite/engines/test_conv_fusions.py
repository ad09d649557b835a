"""The numpy engine's convolution fusions (lite.engines.conv_fusions): summed convolutions of one
input as one convolution."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.errors import KernelError
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node, op_types


def assert_close(got, expected):
    """Float32 agreement on the output's own scale: a fused kernel sums in another order (and
    BLAS builds for AVX2 and AVX-512 order their sums differently), so a small value that comes
    out of cancelling large terms carries their rounding, not its own."""
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))

# -- summed convolutions ---------------------------------------------------------------------------


def repvgg_model(*, stride=1, identity=True, small_pads=0, output_branch=False, second_input=False, relu=True):
    """x -> Conv 3x3 + Conv 1x1 [+ x * s + t] -> Relu -> y (RepVGG's training-form block)."""
    rng = np.random.default_rng(21)
    b = GraphBuilder("repvgg", opset=13)
    x = b.input("x", np.float32, ["N", 8, 7, 7])
    other = b.input("z", np.float32, ["N", 8, 7, 7]) if second_input else x
    w3 = b.constant("w3", rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    b3 = b.constant("b3", rng.standard_normal(8).astype(np.float32))
    w1 = b.constant("w1", rng.standard_normal((8, 8, 1, 1)).astype(np.float32))
    b1 = b.constant("b1", rng.standard_normal(8).astype(np.float32))
    large = b.node("Conv", [x, w3, b3], pads=[1] * 4, strides=[stride] * 2)
    small = b.node("Conv", [other, w1, b1], pads=[small_pads] * 4, strides=[stride] * 2, outputs=["small"])
    total = b.node("Add", [large, small])
    if identity:
        scale = b.constant("s", rng.standard_normal((8, 1, 1)).astype(np.float32))
        shift = b.constant("t", rng.standard_normal((1, 8, 1, 1)).astype(np.float32))
        total = b.node("Add", [total, b.node("Add", [b.node("Mul", [scale, x]), shift])])
    y = b.node("Relu", [total], outputs=["y"]) if relu else b.node("Identity", [total], outputs=["y"])
    b.output(y, np.float32, None)
    if output_branch:
        b.output(small, np.float32, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("options", [{}, {"identity": False}, {"stride": 2, "identity": False}, {"relu": False}],
                         ids=["with identity", "two convolutions", "stride 2", "no relu"])
def test_summed_convolutions_of_one_input_are_one_convolution(options):
    engine = NumpyEngine(repvgg_model(**options))
    relu = options.get("relu", True)
    assert op_types(engine) == (["Conv"] if relu else ["Conv", "Identity"])
    assert engine.plans[0].steps[0].activation == (("Relu", ()) if relu else None)
    rng = np.random.default_rng(22)
    for batch in (1, 2):
        feeds = {"x": rng.standard_normal((batch, 8, 7, 7)).astype(np.float32)}
        assert_close(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"])


@pytest.mark.parametrize("options", [{"output_branch": True}, {"second_input": True}, {"small_pads": 1}],
                         ids=["branch read elsewhere", "other inputs", "windows not nested"])
def test_convolutions_that_cannot_be_merged_stay_as_they_are(options):
    engine = NumpyEngine(repvgg_model(identity=False, **options))
    # Both convolutions still computed: as steps of their own, or one of them in a chain ending
    # with the Add (lite.engines.conv_chain).
    steps = engine.plans[0].steps
    chained = sum(len(step.fn.convs) for step in steps if type(step.fn).__name__ == "_ConvChain")
    assert op_types(engine).count("Conv") + chained == 2
    assert not any(type(step.fn).__name__ == "_MergedConv" for step in steps)
    rng = np.random.default_rng(23)
    feeds = {"x": rng.standard_normal((2, 8, 7, 7)).astype(np.float32)}
    if options.get("second_input"):
        feeds["z"] = rng.standard_normal((2, 8, 7, 7)).astype(np.float32)
    if options.get("small_pads"):  # 7x7 and 9x9 outputs: the Add fails as it did unfused
        with pytest.raises(KernelError):
            engine.run(feeds)
        return
    got, expected = engine.run(feeds), node_by_node(engine, feeds)
    for name in expected:
        assert_close(got[name], expected[name])


# -- convolution chains ----------------------------------------------------------------------------


def inverted_residual_model(*, residual_first=False, conv_output=False, constant_residual=False, add_relu=False,
                            opset=13):
    """x -> Conv 1x1 (Relu6) -> depthwise 3x3 (Relu6) -> Conv 1x1 -> Add(., x) -> y (MobileNetV2's block)."""
    rng = np.random.default_rng(24)
    b = GraphBuilder("inverted_residual", opset=opset)
    x = b.input("x", np.float32, ["N", 8, 5, 5])
    expand = b.node("Conv", [x, b.constant("we", rng.standard_normal((24, 8, 1, 1)).astype(np.float32)),
                             b.constant("be", rng.standard_normal(24).astype(np.float32))],
                    fused_activation="Clip", fused_activation_params=[0.0, 6.0])
    depthwise = b.node("Conv", [expand, b.constant("wd", rng.standard_normal((24, 1, 3, 3)).astype(np.float32))],
                       group=24, pads=[1] * 4, fused_activation="Clip", fused_activation_params=[0.0, 6.0])
    project = b.node("Conv", [depthwise, b.constant("wp", rng.standard_normal((8, 24, 1, 1)).astype(np.float32)),
                              b.constant("bp", rng.standard_normal(8).astype(np.float32))], outputs=["project"])
    residual = b.constant("r", rng.standard_normal((8, 1, 1)).astype(np.float32)) if constant_residual else x
    extra = {"fused_activation": "Relu"} if add_relu else {}
    operands = [residual, project] if residual_first else [project, residual]
    b.output(b.node("Add", operands, outputs=["y"], **extra), np.float32, None)
    if conv_output:
        b.output(project, np.float32, None)
    return load(to_bytes(b.build()))


def chains(engine):
    return [step.fn for step in engine.plans[0].steps if type(step.fn).__name__ == "_ConvChain"]


@pytest.mark.parametrize("options", [{}, {"residual_first": True}, {"opset": 6}],
                         ids=["conv first", "residual first", "opset 6 Add"])
def test_an_inverted_residual_block_is_one_step(options):
    engine = NumpyEngine(inverted_residual_model(**options))
    assert op_types(engine) == ["Add"]
    (chain,) = chains(engine)
    assert len(chain.convs) == 3 and chain.residual is not None
    rng = np.random.default_rng(25)
    for batch in (1, 2):
        feeds = {"x": rng.standard_normal((batch, 8, 5, 5)).astype(np.float32)}
        got, expected = engine.run(feeds)["y"], node_by_node(engine, feeds)["y"]
        if batch == 1:  # one SeparableChain (lite.ops._separable_chain): the same products, in BLAS's order
            assert_close(got, expected)
        else:  # the same operations in the same order: bit for bit the nodes' result
            np.testing.assert_array_equal(got, expected)
    plans = {key[0][0]: [type(conv).__name__ for conv in plan] for key, plan in chain.plans.items()}
    assert plans == {1: ["SeparableChain"], 2: ["_Bound", "_Bound", "_Bound"]}


def test_a_chain_fuses_only_the_runs_of_small_pointwise_and_depthwise_convolutions():
    """A 3x3 convolution, then a depthwise and a pointwise one: the last two as one run."""
    rng = np.random.default_rng(27)
    b = GraphBuilder("stem", opset=13)
    x = b.input("x", np.float32, ["N", 3, 8, 8])
    stem = b.node("Conv", [x, b.constant("ws", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))],
                  pads=[1] * 4, strides=[2, 2], fused_activation="Relu")
    depthwise = b.node("Conv", [stem, b.constant("wd", rng.standard_normal((8, 1, 3, 3)).astype(np.float32))],
                       group=8, pads=[1] * 4)
    b.output(b.node("Conv", [depthwise, b.constant("wp", rng.standard_normal((4, 8, 1, 1)).astype(np.float32))],
                    outputs=["y"]), np.float32, None)
    engine = NumpyEngine(load(to_bytes(b.build())))
    (chain,) = chains(engine)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    assert_close(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"])
    (plan,) = chain.plans.values()
    assert [type(conv).__name__ for conv in plan] == ["_Bound", "SeparableChain"]


@pytest.mark.parametrize("options", [{"conv_output": True}, {"constant_residual": True}, {"add_relu": True}],
                         ids=["conv output returned", "constant residual", "add with an activation"])
def test_a_chain_ends_before_an_add_it_cannot_take(options):
    engine = NumpyEngine(inverted_residual_model(**options))
    assert op_types(engine) == ["Conv", "Add"]
    (chain,) = chains(engine)
    assert chain.residual is None and len(chain.convs) == 3
    feeds = {"x": np.random.default_rng(26).standard_normal((2, 8, 5, 5)).astype(np.float32)}
    got, expected = engine.run(feeds), node_by_node(engine, feeds)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_a_convolution_read_twice_ends_a_chain():
    """x -> Conv a -> Conv b -> y and Conv a's output also returned: no chain through it."""
    rng = np.random.default_rng(28)
    b = GraphBuilder("branching", opset=13)
    x = b.input("x", np.float32, ["N", 4, 6, 6])
    first = b.node("Conv", [x, b.constant("wa", rng.standard_normal((6, 4, 1, 1)).astype(np.float32))],
                   outputs=["a"])
    second = b.node("Conv", [first, b.constant("wb", rng.standard_normal((6, 1, 3, 3)).astype(np.float32))],
                    group=6, pads=[1] * 4)
    b.output(b.node("Relu", [second], outputs=["y"]), np.float32, None)
    b.output(first, np.float32, None)
    engine = NumpyEngine(load(to_bytes(b.build())))
    assert not chains(engine)
    feeds = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    got, expected = engine.run(feeds), node_by_node(engine, feeds)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_a_residual_of_another_shape_goes_through_the_add_kernel():
    """Operands that broadcast (a residual of one channel): the Add kernel's own broadcasting."""
    rng = np.random.default_rng(27)
    b = GraphBuilder("broadcast_residual", opset=13)
    x = b.input("x", np.float32, ["N", 4, 3, 3])
    z = b.input("z", np.float32, ["N", 1, 3, 3])
    conv = b.node("Conv", [x, b.constant("w", rng.standard_normal((4, 4, 1, 1)).astype(np.float32))])
    b.output(b.node("Add", [z, conv], outputs=["y"]), np.float32, None)
    engine = NumpyEngine(load(to_bytes(b.build())))
    assert op_types(engine) == ["Add"]
    feeds = {"x": rng.standard_normal((2, 4, 3, 3)).astype(np.float32),
             "z": rng.standard_normal((2, 1, 3, 3)).astype(np.float32)}
    np.testing.assert_array_equal(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"])


def squeeze_excite_block_model():
    """x -> Conv 1x1 (HardSwish) -> depthwise 3x3 (HardSwish) -> squeeze-excitation -> Conv 1x1 -> Add(., x)
    (MobileNetV3's block)."""
    rng = np.random.default_rng(29)

    def constant(name, *shape):
        return b.constant(name, rng.standard_normal(shape).astype(np.float32))

    b = GraphBuilder("squeeze_excite_block", opset=13)
    x = b.input("x", np.float32, ["N", 8, 4, 4])
    expand = b.node("Conv", [x, constant("we", 24, 8, 1, 1), constant("be", 24)], fused_activation="HardSwish")
    depthwise = b.node("Conv", [expand, constant("wd", 24, 1, 3, 3), constant("bd", 24)], group=24, pads=[1] * 4,
                       fused_activation="HardSwish")
    means = b.node("ReduceMean", [depthwise], axes=[2, 3], keepdims=1)
    hidden = b.node("Conv", [means, constant("w1", 6, 24, 1, 1), constant("b1", 6)], fused_activation="Relu")
    gate = b.node("Conv", [hidden, constant("w2", 24, 6, 1, 1), constant("b2", 24)], fused_activation="HardSigmoid",
                  fused_activation_params=[1 / 6, 0.5])
    gated = b.node("Mul", [depthwise, gate])
    project = b.node("Conv", [gated, constant("wp", 8, 24, 1, 1), constant("bp", 8)])
    b.output(b.node("Add", [project, x], outputs=["y"]), np.float32, None)
    return load(to_bytes(b.build()))


def test_a_squeeze_excitation_block_joins_the_chain_around_it():
    engine = NumpyEngine(squeeze_excite_block_model())
    assert op_types(engine) == ["Add"]
    (chain,) = chains(engine)
    assert [type(conv).__name__ for conv in chain.convs] == ["_Bound", "_Bound", "SqueezeExcite", "_Bound"]
    rng = np.random.default_rng(30)
    for batch in (1, 2):
        feeds = {"x": rng.standard_normal((batch, 8, 4, 4)).astype(np.float32)}
        assert_close(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"])
    plans = {key[0][0]: [type(conv).__name__ for conv in plan] for key, plan in chain.plans.items()}
    assert plans == {1: ["SeparableChain"], 2: ["_Bound", "_Bound", "SqueezeExcite", "_Bound"]}
