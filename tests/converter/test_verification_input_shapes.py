"""Synthesized verification inputs fit the naming Hugging Face optimum's exports use: a decoder's
attention mask of axis ``past_sequence_length + sequence_length`` beside a past of
``past_sequence_length``, which used to leave verification skipped."""

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


def test_a_waveform_named_as_a_sequence_still_gets_audio_samples():
    """optimum names wav2vec2's ``input_values`` ``[batch_size, sequence_length]``: its conv front
    end needs hundreds of samples, not a token count."""
    audio = helper.make_tensor_value_info("input_values", TensorProto.FLOAT, ["batch_size", "sequence_length"])
    output = helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [None] * 2)
    model = _model([helper.make_node("Add", ["input_values", "input_values"], ["doubled"])], [audio], [output], {})
    assert next(plans(model)).shapes["input_values"] == [1, 512]
