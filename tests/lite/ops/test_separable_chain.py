"""Runs of pointwise and depthwise convolutions on small maps as one kernel
(lite.ops._separable_chain) against onnx.reference's Conv layer by layer, and the cases it
declines."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _separable_chain as separable_chain
from lite.ops import fused_activation
from lite.ops._conv_common import transposes_through_pitch
from tests.lite.ops._reference import channels_last, reference_outputs

rng = np.random.default_rng(41)

RELU6 = ("Clip", (0.0, 6.0))


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def attributes(group=1, pads=None, strides=None, dilations=None, auto_pad="NOTSET", kernel_shape=None):
    """lite.ops.conv's attribute order: auto_pad, dilations, group, kernel_shape, pads, strides."""
    return (auto_pad, dilations, group, kernel_shape, pads, strides)


def reference(x, layers):
    """The layers one by one: onnx.reference's Conv, then the fused activation."""
    for w, b, attrs, activation in layers:
        auto_pad, dilations, group, kernel_shape, pads, strides = attrs
        given = {"auto_pad": auto_pad, "group": group}
        given.update({k: v for k, v in {"dilations": dilations, "pads": pads, "strides": strides}.items() if v})
        inputs = [x, w] if b is None else [x, w, b]
        x = reference_outputs("Conv", inputs, given, 11)[0]
        if activation is not None:
            x = fused_activation.apply(x, *activation)
    return x


def chain_of(layers, x_shape, dtype=np.float32):
    stages, shape = [], x_shape
    for w, b, attrs, activation in layers:
        stage = separable_chain.stage(w, b, attrs, activation, shape, dtype)
        assert stage is not None, "expected a stage"
        stages.append(stage)
        shape = separable_chain.output_shape_of(w, attrs, shape)
    return separable_chain.SeparableChain(stages, dtype)


def inverted_residual(channels, expanded, out_channels, depthwise_attributes, kernel=3, activation=RELU6,
                      dtype=np.float32):
    return [
        (normal(expanded, channels, 1, 1, dtype=dtype), normal(expanded, dtype=dtype), attributes(), activation),
        (normal(expanded, 1, kernel, kernel, dtype=dtype), normal(expanded, dtype=dtype),
         attributes(group=expanded, **depthwise_attributes), activation),
        (normal(out_channels, expanded, 1, 1, dtype=dtype), normal(out_channels, dtype=dtype), attributes(), None),
    ]


CASES = {
    "4x4 stride 1": ((1, 5, 4, 4), inverted_residual(5, 13, 7, {"pads": [1, 1, 1, 1]})),
    "7x7 stride 2, odd pads": ((1, 6, 7, 7), inverted_residual(6, 10, 4, {"pads": [0, 1, 1, 0], "strides": [2, 2]})),
    "same upper": ((1, 3, 6, 5), inverted_residual(3, 9, 3, {"auto_pad": "SAME_UPPER", "strides": [2, 1]})),
    "5x5 dilated": ((1, 4, 8, 6), inverted_residual(4, 8, 4, {"pads": [4, 4, 4, 4], "dilations": [2, 2]}, kernel=5,
                                                     activation=("HardSwish", ()))),
    "2x2 no padding": ((1, 16, 2, 2), inverted_residual(16, 48, 24, {"pads": [0, 0, 0, 0]}, kernel=1)),
    "16x16, channels-last output": ((1, 4, 16, 16), inverted_residual(4, 8, 6, {"pads": [1, 1, 1, 1]})),
    # Biases of (1024, 24) cells, too large to materialize: added broadcast (lite.ops._helpers.full_operand).
    # Strided across: the depthwise stage's input in column phases (a 5x5 kernel reads 3 of phase 0).
    "32x32 stride 2": ((1, 6, 32, 32), inverted_residual(6, 24, 8, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                                        activation=("Silu", ()))),
    "stride 3 across, 5x5, odd pads": ((1, 4, 11, 13), inverted_residual(4, 8, 4, {"pads": [2, 1, 0, 2],
                                                                                  "strides": [1, 3]}, kernel=5)),
    "starting strided": ((1, 12, 16, 16), inverted_residual(4, 12, 5, {"pads": [1, 1, 1, 1], "strides": [2, 2]})[1:]),
    "depthwise into phases": ((1, 8, 12, 12), [
        (normal(8, 1, 3, 3), normal(8), attributes(group=8, pads=[1, 1, 1, 1]), ("Silu", ())),
        (normal(8, 1, 3, 3), normal(8), attributes(group=8, pads=[1, 1, 1, 1], strides=[2, 2]), RELU6),
        (normal(5, 8, 1, 1), normal(5), attributes(), None)]),
    "pointwise before phases": ((1, 8, 12, 12), [
        (normal(8, 1, 3, 3), normal(8), attributes(group=8, pads=[1, 1, 1, 1]), RELU6),
        (normal(12, 8, 1, 1), normal(12), attributes(), ("Silu", ())),
        (normal(12, 1, 3, 3), normal(12), attributes(group=12, pads=[1, 1, 1, 1], strides=[2, 2]), RELU6),
        (normal(5, 12, 1, 1), normal(5), attributes(), None)]),
    "pointwise before a strided view, 5x5, odd pads": ((1, 6, 9, 12), [
        (normal(6, 6, 1, 1), None, attributes(), None),
        (normal(10, 6, 1, 1), normal(10), attributes(), ("HardSwish", ())),
        (normal(10, 1, 5, 5), normal(10), attributes(group=10, pads=[2, 1, 0, 2], strides=[2, 3]), None),
        (normal(5, 10, 1, 1), normal(5), attributes(), None)]),
    "pointwise before phases, odd width": ((1, 8, 12, 13), [
        (normal(8, 8, 1, 1), normal(8), attributes(), RELU6),
        (normal(12, 8, 1, 1), normal(12), attributes(), RELU6),
        (normal(12, 1, 3, 3), normal(12), attributes(group=12, pads=[1, 1, 1, 1], strides=[2, 2]), RELU6),
        (normal(5, 12, 1, 1), normal(5), attributes(), None)]),
    "stride 2, dilated": ((1, 4, 9, 9), inverted_residual(4, 8, 4, {"pads": [2, 2, 2, 2], "strides": [2, 2],
                                                                     "dilations": [2, 2]})),
    "32x32, large biases": ((1, 4, 32, 32), inverted_residual(4, 24, 6, {"pads": [1, 1, 1, 1]}, activation=None)),
}


@pytest.mark.parametrize("layout", ["channels first", "channels last"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_run_matches_the_layers_one_by_one(case, layout):
    x_shape, layers = CASES[case]
    x = normal(*x_shape)
    chain = chain_of(layers, x_shape)
    got = chain(channels_last(x) if layout == "channels last" else x)
    # A last pointwise stage writes channels-first on small maps, channels-last on larger ones.
    small = got.shape[2] * got.shape[3] < separable_chain.CHANNELS_LAST_MIN_PIXELS
    assert got.flags.c_contiguous if small else got.transpose(0, 2, 3, 1).flags.c_contiguous
    np.testing.assert_allclose(got, reference(x, layers), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(chain(x), got)  # its scratch holds nothing from the last call


def test_large_pointwise_stages_multiply_in_blocks_of_output_channels():
    # (16 x 256) @ (256 x 512) as rows: 2M multiply-adds in 4 blocks; (512 x 512) @ (512 x 16)
    # channels-first: 4M in 8 blocks.
    x = normal(1, 256, 4, 4)
    layers = [(normal(512, 256, 1, 1) / 16, normal(512), attributes(), RELU6),
              (normal(512, 1, 3, 3), normal(512), attributes(group=512, pads=[1, 1, 1, 1]), None),
              (normal(512, 512, 1, 1) / 22, normal(512), attributes(), ("HardSwish", ()))]
    chain = chain_of(layers, x.shape)
    assert (chain.stages[0].row_blocks, chain.stages[2].first_blocks) == (4, 8) and chain.channels_first
    for layout in (x, channels_last(x)):
        np.testing.assert_allclose(chain(layout), reference(x, layers), rtol=1e-4, atol=1e-4)


def test_a_depthwise_stage_without_activation_hands_its_bias_to_the_pointwise_stage_after_it():
    x = normal(1, 6, 8, 8)
    layers = [(normal(12, 6, 1, 1), normal(12), attributes(), RELU6),
              (normal(12, 1, 3, 3), normal(12), attributes(group=12, pads=[1, 1, 1, 1], strides=[2, 2]), None),
              (normal(5, 12, 1, 1), None, attributes(), ("Silu", ()))]
    chain = chain_of(layers, x.shape)
    assert chain.stages[1].bias is None and chain.stages[2].bias_vector is not None
    np.testing.assert_allclose(chain(x), reference(x, layers), rtol=1e-5, atol=1e-5)


def test_a_run_ending_with_a_depthwise_stage_is_channels_last_and_without_bias():
    x = normal(1, 8, 5, 5)
    layers = [(normal(12, 8, 1, 1), None, attributes(), ("Relu", ())),
              (normal(12, 1, 3, 3), None, attributes(group=12, pads=[1, 1, 1, 1], strides=[2, 2]), None)]
    got = chain_of(layers, x.shape)(x)
    assert got.shape == (1, 12, 3, 3) and got.transpose(0, 2, 3, 1).flags.c_contiguous
    np.testing.assert_allclose(got, reference(x, layers), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels, strides", [(16, [1, 1]), (48, [2, 2])], ids=["padded image", "phases"])
def test_a_run_starting_with_a_depthwise_stage_transposes_a_large_channels_first_image_through_pitched_planes(
        channels, strides):
    x = normal(1, channels, 32, 32)  # 4 KiB planes (lite.ops._conv_common.transposes_through_pitch)
    layers = [(normal(channels, 1, 3, 3), normal(channels), attributes(group=channels, pads=[1, 1, 1, 1],
                                                                        strides=strides), RELU6),
              (normal(8, channels, 1, 1), normal(8), attributes(), None)]
    assert transposes_through_pitch(channels, 32, 32, 4)
    chain = chain_of(layers, x.shape)
    expected = reference(x, layers)
    np.testing.assert_allclose(chain(x), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(chain(channels_last(x)), expected, rtol=1e-4, atol=1e-4)


def test_a_run_starting_with_a_depthwise_stage_in_float64():
    x = normal(1, 6, 4, 4, dtype=np.float64)
    layers = [(normal(6, 1, 3, 3, dtype=np.float64), normal(6, dtype=np.float64),
               attributes(group=6, pads=[1, 1, 1, 1]), ("Silu", ())),
              (normal(9, 6, 1, 1, dtype=np.float64), None, attributes(), RELU6)]
    got = chain_of(layers, x.shape, np.float64)(channels_last(x))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference(x, layers), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("weights, attrs, x_shape, dtype", [
    ((8, 4, 3, 3), attributes(pads=[1, 1, 1, 1]), (1, 4, 4, 4), np.float32),  # a dense 3x3
    ((8, 2, 3, 3), attributes(group=2, pads=[1, 1, 1, 1]), (1, 4, 4, 4), np.float32),  # grouped
    ((8, 1, 3, 3), attributes(group=4, pads=[1, 1, 1, 1]), (1, 4, 4, 4), np.float32),  # channel multiplier 2
    ((8, 4, 1, 1), attributes(strides=[2, 2]), (1, 4, 4, 4), np.float32),  # strided 1x1
    ((8, 4, 1, 1), attributes(pads=[1, 1, 1, 1]), (1, 4, 4, 4), np.float32),  # padded 1x1
    ((8, 4, 1, 1), attributes(), (2, 4, 4, 4), np.float32),  # batch 2
    ((8, 4, 1, 1), attributes(), (1, 4, 64, 64), np.float32),  # a map larger than MAX_PIXELS
    ((4, 1, 3, 3), attributes(group=4, pads=[1, 1, 1, 1], strides=[1, 5]), (1, 4, 16, 16), np.float32),  # stride 5
    ((4, 1, 3, 3), attributes(group=4, pads=[1, 1, 1, 1]), (1, 4, 4, 4), np.float16),  # computed in float32
    ((4, 1, 3), attributes(group=4, pads=[1, 1]), (1, 4, 4), np.float32),  # 1-D
])
def test_convolutions_that_are_not_stages_are_declined(weights, attrs, x_shape, dtype):
    w = np.zeros(weights, dtype)
    assert separable_chain.stage(w, None, attrs, None, x_shape, dtype) is None


def squeeze_excite(channels, hidden, dtype=np.float32):
    """A SqueezeExcite block (Relu, then HardSigmoid: MobileNetV3's) and its formula."""
    from lite.ops._squeeze_excite import SqueezeExcite

    w1, b1 = normal(hidden, channels, dtype=dtype), normal(hidden, dtype=dtype)
    w2, b2 = normal(channels, hidden, dtype=dtype), normal(channels, dtype=dtype)
    hard_sigmoid = ("HardSigmoid", (1 / 6, 0.5))

    def formula(x):
        means = x.mean(axis=(2, 3))
        gate = fused_activation.apply(np.maximum(means @ w1.T + b1, 0) @ w2.T + b2, *hard_sigmoid)
        return x * gate[:, :, None, None]

    block = SqueezeExcite(w1, b1, ("Relu", ()), w2, b2, hard_sigmoid, lambda x, allocate: formula(x))
    return block, formula


@pytest.mark.parametrize("layout", ["channels first", "channels last"])
@pytest.mark.parametrize("position", ["between", "first", "last"])
def test_a_squeeze_excitation_stage_gates_the_rows_in_place_of_the_block(position, layout):
    x = normal(1, 6, 4, 4)
    expand = [(normal(12, 6, 1, 1), normal(12), attributes(), ("HardSwish", ())),
              (normal(12, 1, 3, 3), normal(12), attributes(group=12, pads=[1, 1, 1, 1]), ("HardSwish", ()))]
    project = [(normal(6, 12, 1, 1), normal(6), attributes(), None)]
    block, formula = squeeze_excite(12, 4)
    if position == "first":
        x = normal(1, 12, 4, 4)
        before, after = [], [*expand[1:], *project]
    elif position == "last":
        before, after = expand, []
    else:
        before, after = expand, project
    stages, shape = [], x.shape
    for w, b, attrs, activation in before:
        stages.append(separable_chain.stage(w, b, attrs, activation, shape, np.float32))
        shape = separable_chain.output_shape_of(w, attrs, shape)
    stages.append(separable_chain.squeeze_stage(block, shape, np.float32))
    for w, b, attrs, activation in after:
        stages.append(separable_chain.stage(w, b, attrs, activation, shape, np.float32))
        shape = separable_chain.output_shape_of(w, attrs, shape)
    assert None not in stages
    got = separable_chain.SeparableChain(stages, np.float32)(channels_last(x) if layout == "channels last" else x)
    np.testing.assert_allclose(got, reference(formula(reference(x, before)), after), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["channels first", "channels last"])
def test_a_squeeze_excitation_stage_writes_into_the_column_phases_of_a_strided_depthwise_stage(layout):
    x = normal(1, 12, 10, 10)
    block, formula = squeeze_excite(12, 4)
    after = [(normal(12, 1, 3, 3), normal(12), attributes(group=12, pads=[1, 1, 1, 1], strides=[2, 2]), RELU6),
             (normal(6, 12, 1, 1), normal(6), attributes(), None)]
    stages, shape = [separable_chain.squeeze_stage(block, x.shape, np.float32)], x.shape
    for w, b, attrs, activation in after:
        stages.append(separable_chain.stage(w, b, attrs, activation, shape, np.float32))
        shape = separable_chain.output_shape_of(w, attrs, shape)
    assert stages[1].phased
    got = separable_chain.SeparableChain(stages, np.float32)(channels_last(x) if layout == "channels last" else x)
    np.testing.assert_allclose(got, reference(formula(x), after), rtol=1e-4, atol=1e-4)


def test_a_squeeze_excitation_stage_is_declined_where_its_block_would_fall_back():
    block, _ = squeeze_excite(12, 4)
    assert separable_chain.squeeze_stage(block, (1, 12, 4, 4), np.float32) is not None
    for shape, dtype in [((2, 12, 4, 4), np.float32), ((1, 8, 4, 4), np.float32), ((1, 12, 4, 4), np.float64),
                         ((1, 12, 64, 64), np.float32)]:
        assert separable_chain.squeeze_stage(block, shape, dtype) is None
