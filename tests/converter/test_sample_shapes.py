"""The converter records the input shapes its verification ran on, where an input has symbolic
sizes beyond the batch, and the runtime's own measurements make their random inputs of those
sizes (lite.signature.sample_shapes) instead of a 1x1 image."""

from __future__ import annotations

import json

import numpy as np
import pytest
from passtools import make_model, rng

import converter
import lite
from lite import sample_inputs
from lite.format import load
from lite.signature import SAMPLE_SHAPES_KEY, TensorSpec, concrete_shape, sample_shapes

pytest.importorskip("onnxruntime")


def _detector():
    """A [N, 3, H, W] input whose layers reject a 1x1 image: a reflect Pad needs 2 pixels a side."""
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, H, W] images) => (float[N, 4, H, W] output) {
            pads = Constant <value: tensor = int64[8] {0, 0, 2, 2, 0, 0, 2, 2}> ()
            padded = Pad <mode: string = "reflect"> (images, pads)
            output = Conv (padded, w)
        }""",
        w=rng().normal(size=(4, 3, 5, 5)).astype(np.float32),
    )


def _classifier():
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 8, 8] images) => (float[N, 4, 8, 8] output) {
            output = Conv <pads: ints = [1, 1, 1, 1]> (images, w)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
    )


def test_shapes_the_verification_ran_on_are_recorded_and_used(tmp_path):
    path = tmp_path / "detector.lite"
    report = converter.convert(_detector(), path)
    assert report.verification.status == "passed"
    recorded = json.loads(load(path).metadata[SAMPLE_SHAPES_KEY])
    n, c, h, w = recorded["images"]
    assert c == 3 and h >= 3 and w >= 3
    model = lite.Model.load(path, device="numpy")
    assert sample_shapes(model.ir) == {"images": (n, c, h, w)}
    # The ONNX Runtime engine's measurements at load and lite bench draw inputs of that size.
    from lite.commands._inputs import random_inputs
    from lite.engines.ort.int8_choice import random_feeds

    assert random_feeds(model.ir)["images"].shape == (1, 3, h, w)
    assert random_inputs(model, batch=4, shapes={})["images"].shape == (4, 3, h, w)
    assert model.predict(random_inputs(model, batch=1, shapes={}))["output"].shape == (1, 4, h, w)


def test_nothing_is_recorded_without_symbolic_sizes_beyond_the_batch_or_without_verification(tmp_path):
    converter.convert(_classifier(), tmp_path / "classifier.lite")
    assert SAMPLE_SHAPES_KEY not in load(tmp_path / "classifier.lite").metadata
    converter.convert(_detector(), tmp_path / "unverified.lite", verify=False)
    assert SAMPLE_SHAPES_KEY not in load(tmp_path / "unverified.lite").metadata


def test_the_user_s_samples_are_the_recorded_shape(tmp_path):
    samples = tmp_path / "samples.npz"
    np.savez(samples, images=rng().normal(size=(1, 3, 20, 30)).astype(np.float32))
    converter.convert(_detector(), tmp_path / "detector.lite", verify_data=samples)
    assert json.loads(load(tmp_path / "detector.lite").metadata[SAMPLE_SHAPES_KEY]) == {"images": [1, 3, 20, 30]}


@pytest.mark.parametrize("recorded, expected", [
    ('{"x": [2, 3, 32, 48]}', {"x": (2, 3, 32, 48)}),
    ('{"x": [2, 3, 0, 48], "y": [1, "W"], "z": 5}', {}),  # sizes must be positive integers
    ("not json", {}), ("[1, 2]", {}),
])
def test_recorded_shapes_are_read_defensively(recorded, expected):
    from lite.format import ir

    model = ir.Model([], metadata={SAMPLE_SHAPES_KEY: recorded})
    assert sample_shapes(model) == expected


def test_a_recorded_shape_of_another_signature_is_ignored():
    spec = TensorSpec("x", np.dtype(np.float32), ("N", 3, "H", "W"))
    assert concrete_shape(spec, 4, (1, 3, 32, 48)) == (4, 3, 32, 48)
    assert concrete_shape(spec, 4, (1, 1, 32, 48)) == (4, 3, 1, 1)  # a fixed size differs
    assert concrete_shape(spec, 4, (1, 3, 32)) == (4, 3, 1, 1)  # another rank
    assert concrete_shape(spec, 4) == (4, 3, 1, 1)


def _recurrent():
    """Silero VAD's signature: audio ``[batch, 8]`` and an LSTM state ``[2, batch, 4]`` that shares
    the batch by name on axis 1; verification runs it at batch 2 (``batch`` is the name
    --dynamic-batch gives), so the recorded state is [2, 2, 4]."""
    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 8] input, float[2, batch, 4] state) => (float[batch, 4] output, float[2, batch, 4] stateN) {
            zero = Constant <value: tensor = int64[1] {0}> ()
            one = Constant <value: tensor = int64[1] {1}> ()
            x = Unsqueeze (input, zero)
            h0 = Gather <axis: int = 0> (state, zero)
            c0 = Gather <axis: int = 0> (state, one)
            y, yh, yc = LSTM <hidden_size: int = 4> (x, w, r, , , h0, c0)
            output = Squeeze (yh, zero)
            stateN = Concat <axis: int = 0> (yh, yc)
        }""",
        w=rng().normal(size=(1, 16, 8)).astype(np.float32),
        r=rng().normal(size=(1, 16, 4)).astype(np.float32),
    )


def test_a_dimension_named_like_the_batch_takes_the_batch_on_every_axis(tmp_path):
    from lite.commands._inputs import random_inputs
    from lite.engines.ort.int8_choice import random_feeds
    from lite.signature import batch_names

    path = tmp_path / "recurrent.lite"
    converter.convert(_recurrent(), path)
    assert json.loads(load(path).metadata[SAMPLE_SHAPES_KEY]) == {"state": [2, 2, 4]}
    model = lite.Model.load(path, device="numpy")
    assert batch_names(model.inputs) == {"batch"}
    for batch in (1, 3):
        feeds = random_inputs(model, batch=batch, shapes={})  # lite bench, lite run
        assert feeds["input"].shape == (batch, 8) and feeds["state"].shape == (2, batch, 4)
        assert model.predict(feeds)["stateN"].shape == (2, batch, 4)
        assert sample_inputs.random_feeds(model.ir, batch)["state"].shape == (2, batch, 4)  # autotuning
    assert random_feeds(model.ir)["state"].shape == (2, 1, 4)  # the ONNX Runtime engine's choices at load
    spec = TensorSpec("state", np.dtype(np.float32), (2, "batch", 4))
    assert concrete_shape(spec, 3, (2, 2, 4)) == (2, 2, 4)  # without the names: the sample's
    assert concrete_shape(spec, 3, (2, 2, 4), frozenset({"batch"})) == (2, 3, 4)
    assert concrete_shape(spec, 3, None, frozenset({"batch"})) == (2, 3, 4)
