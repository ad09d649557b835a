"""Random inputs planned from the graph (lite.sample_inputs) for benchmarks and autotuning, on
small models whose open sizes and index ranges the signature alone does not reveal (files
without the sizes a conversion's verification records)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lite
from lite.cli import main
from lite.errors import AutotuneSkippedWarning, SampleInputError
from lite.format import GraphBuilder, save, to_bytes
from lite.sample_inputs import random_feeds, runnable_feeds

rng = np.random.default_rng(0)


def _token_types():
    """BERT's embeddings: token type ids (int32, cast and unsqueezed) index a two-row table."""
    b = GraphBuilder("token_types", opset=17)
    ids = b.input("input_ids", np.int64, ["batch", "sequence"])
    types = b.input("token_type_ids", np.int32, ["batch", "sequence"])
    words = b.node("Gather", [b.constant("words", rng.standard_normal((30, 4)).astype(np.float32)), ids])
    cast = b.node("Cast", [types], to=7)
    flat = b.node("Reshape", [cast, b.constant("flat", np.array([-1], np.int64))])
    kinds = b.node("Gather", [b.constant("kinds", rng.standard_normal((2, 4)).astype(np.float32)), flat])
    kinds = b.node("Reshape", [kinds, b.node("Shape", [words])])
    b.output(b.node("Add", [words, kinds], outputs=["embedded"]), np.float32, ["batch", "sequence", 4])
    return b.build()


def _patch_embedding(positions: int = 16):
    """ViT's patch embedding: 8-pixel patches of an open-sized image plus a learned position per
    patch: it runs on a 32x32 image only (16 patches), not 224 pixels."""
    b = GraphBuilder("patches", opset=17)
    x = b.input("pixel_values", np.float32, ["batch", "num_channels", "height", "width"])
    scaled = b.node("Mul", [x, b.constant("scale", np.array(0.5, np.float32))])
    y = b.node("Conv", [scaled, b.constant("w", rng.standard_normal((4, 3, 8, 8)).astype(np.float32))],
               strides=[8, 8])
    y = b.node("Reshape", [y, b.constant("shape", np.array([0, 4, -1], np.int64))])
    y = b.node("Add", [y, b.constant("pos", rng.standard_normal((1, 4, positions)).astype(np.float32))],
               outputs=["patches"])
    b.output(y, np.float32, ["batch", 4, positions])
    return b.build()


def _cache():
    """GPT-2's cache: the mask spans the past and the new tokens, named as their sum, and weighs
    every position (a product over them: lengths that differ fail)."""
    b = GraphBuilder("cache", opset=17)
    past = b.input("past", np.float32, ["batch", "past_sequence_length", 4])
    new = b.input("hidden", np.float32, ["batch", "sequence_length", 4])
    mask = b.input("attention_mask", np.int64, ["batch", "past_sequence_length + sequence_length"])
    keys = b.node("Concat", [past, new], axis=1)
    weights = b.node("Unsqueeze", [b.node("Cast", [mask], to=1), b.constant("axis", np.array([1], np.int64))])
    b.output(b.node("MatMul", [weights, keys], outputs=["masked"]), np.float32, None)
    return b.build()


def test_integers_that_index_a_table_stay_within_its_rows():
    feeds = random_feeds(_token_types(), batch=2)
    assert feeds["token_type_ids"].dtype == np.int32 and set(np.unique(feeds["token_type_ids"])) <= {0, 1}
    assert feeds["input_ids"].shape == (2, 8) and feeds["input_ids"].max() < 30
    assert lite.Model.load(to_bytes(_token_types()), device="numpy").predict(feeds)["embedded"].shape == (2, 8, 4)


def test_an_image_gets_its_convolution_s_channels_and_sizes_that_run():
    model = _patch_embedding()
    assert random_feeds(model)["pixel_values"].shape == (1, 3, 224, 224)  # the first guess, before trying it
    loaded = lite.Model.load(to_bytes(model), device="numpy")
    feeds, outputs = runnable_feeds(model, 2, loaded.predict)
    assert feeds["pixel_values"].shape == (2, 3, 32, 32) and outputs["patches"].shape == (2, 4, 16)


def test_a_dimension_named_by_an_expression_is_the_sum_of_its_parts():
    feeds = random_feeds(_cache())
    past, new = feeds["past"].shape[1], feeds["hidden"].shape[1]
    assert past > 1 and new > 1 and feeds["attention_mask"].shape == (1, past + new)
    assert (feeds["attention_mask"] == 1).all()  # a mask: ones
    masked = lite.Model.load(to_bytes(_cache()), device="numpy").predict(feeds)["masked"]
    assert masked.shape == (1, 1, 4)


def test_given_shapes_size_the_dimensions_other_inputs_share():
    feeds = random_feeds(_cache(), given={"past": (1, 5, 4), "hidden": (1, 3, 4)})
    assert feeds["attention_mask"].shape == (1, 8)


@pytest.mark.parametrize("build", [_token_types, _patch_embedding, _cache])
def test_autotuning_runs_models_whose_open_sizes_the_file_does_not_record(build):
    model = lite.Model.load(to_bytes(build()), engine="auto", cache_dir=None)
    assert model.engine.kind == "auto"
    assert model.engine.decision["buckets"][0]["candidates"]


def test_autotuning_falls_back_to_the_default_engine_when_random_inputs_do_not_run(recwarn):
    data = to_bytes(_patch_embedding(positions=9))  # 24x24 images only: no planned size
    with pytest.warns(AutotuneSkippedWarning, match=r"'pixel_values'.*input_shapes=\{'pixel_values': \(D1"):
        model = lite.Model.load(data, engine="auto", cache_dir=None)
    assert model.engine.kind != "auto"
    x = rng.standard_normal((1, 3, 24, 24)).astype(np.float32)
    assert model.predict({"pixel_values": x})["patches"].shape == (1, 4, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutotuneSkippedWarning)
        tuned = lite.Model.load(data, engine="auto", cache_dir=None, input_shapes={"pixel_values": (1, 3, 24, 24)},
                                batch_sizes=(1, 2))
    assert [bucket["batch"] for bucket in tuned.engine.decision["buckets"]] == [1, 2]


def test_the_error_names_the_inputs_whose_sizes_were_chosen():
    model = _patch_embedding(positions=9)
    loaded = lite.Model.load(to_bytes(model), device="numpy")
    with pytest.raises(SampleInputError, match=r"input 'pixel_values' took sizes.*\[1, 3, 224, 224\], then "
                                               r"pixel_values\[1, 3, 32, 32\].*--shape pixel_values:D1,D2,") as caught:
        runnable_feeds(model, 1, loaded.predict)
    assert caught.value.inputs == ("pixel_values",)


@pytest.mark.parametrize("autotune", [[], ["--autotune", "1"]])
def test_bench_says_in_one_line_which_input_to_give_a_shape(tmp_path, capsys, autotune):
    path = tmp_path / "patches.lite"
    save(_patch_embedding(positions=9), path)
    assert main(["bench", str(path), "--loops", "1", "--warmup", "0", *autotune]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite bench: error: ") and err.count("\n") == 1
    assert "'pixel_values'" in err and "--shape pixel_values:D1,D2,..." in err
    assert main(["bench", str(path), "--loops", "1", "--warmup", "0", "--shape", "pixel_values:1,3,24,24",
                 *autotune]) == 0
    assert "pixel_values float32[1, 3, 24, 24]" in capsys.readouterr().out


def test_bench_runs_token_types_and_images_the_signature_leaves_open(tmp_path, capsys):
    for build in (_token_types, _patch_embedding, _cache):
        path = tmp_path / f"{build.__name__}.lite"
        save(build(), path)
        assert main(["bench", str(path), "--loops", "1", "--warmup", "0"]) == 0, capsys.readouterr().err
    assert "pixel_values float32[1, 3, 32, 32]" in capsys.readouterr().out


def test_a_channels_last_image_gets_its_channels_on_the_last_axis():
    b = GraphBuilder("nhwc", opset=17)
    x = b.input("image", np.float32, ["batch", "h", "w", "c"])
    y = b.node("Transpose", [b.node("Cast", [x], to=1)], perm=[0, 3, 1, 2])
    y = b.node("Conv", [y, b.constant("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))], outputs=["y"])
    b.output(y, np.float32, None)
    assert random_feeds(b.build())["image"].shape == (1, 224, 224, 3)


def test_input_shapes_must_name_inputs_of_the_model():
    with pytest.raises(lite.InvalidInputError, match="no such input; its inputs: pixel_values"):
        lite.Model.load(to_bytes(_patch_embedding()), engine="auto", cache_dir=None, input_shapes={"image": (1, 3)})
