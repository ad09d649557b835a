"""Warm-up before a served model is READY: each configured batch size, at the sizes the file
records for open dimensions, and the batch axis a dynamically batched model must lead with."""

from __future__ import annotations

import numpy as np
import pytest

from serving.config import parse_config


def _detector(path, metadata=None):
    """[N, 3, H, W] in, each channel's pixels reshaped into two rows: a 1x1 image fails."""
    from lite.format import GraphBuilder, save

    b = GraphBuilder("detector")
    x = b.input("images", np.float32, ["N", 3, "H", "W"])
    rows = b.constant("rows", np.array([0, 3, 2, -1], np.int64))
    b.output(b.node("Reshape", [x, rows], outputs=["output"]), np.float32, ["N", 3, 2, None])
    save(b.build(metadata=metadata), path)
    return path


def test_a_model_with_open_sizes_loads_warming_up_at_the_sizes_its_file_records(tmp_path, monkeypatch):
    """A detector's [N, 3, H, W] input: zeros of 1x1 are no request's shape and its layers reject
    them, so without recorded sizes the batch-size warm-up is skipped; with them it runs there."""
    import lite
    from lite.signature import SAMPLE_SHAPES_KEY
    from serving.errors import ModelLoadError
    from serving.metrics import Metrics
    from serving.model import ServedModel

    seen = []
    original = lite.Model.predict

    def recording(self, inputs, *args, **kwargs):
        seen.append(inputs["images"].shape)
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(lite.Model, "predict", recording)
    config = parse_config({"max_batch_size": 4}, "m")

    def load(path, config=config):
        return ServedModel.load("m", 1, path, config, device="numpy", instances=1, max_queue_size=8,
                                metrics=Metrics())

    assert load(_detector(tmp_path / "open.lite")).state == "LOADING" and seen == []
    recorded = _detector(tmp_path / "recorded.lite", {SAMPLE_SHAPES_KEY: '{"images": [1, 3, 24, 32]}'})
    load(recorded)
    assert sorted(seen) == [(1, 3, 24, 32), (4, 3, 24, 32)]
    # Warm-up asked for in the configuration still runs, and its failure says what to do.
    with pytest.raises(ModelLoadError, match="ran with size 1 where the model leaves a size open"):
        load(tmp_path / "open.lite", parse_config({"max_batch_size": 4, "warmup": {"batch_size": 1, "count": 1}}, "m"))


def test_a_model_whose_outputs_do_not_lead_with_the_batch_is_refused_at_load_when_batched(tmp_path):
    """Merged requests are split along the first axis: [N, 3] in, [3, N] out cannot be batched."""
    from lite.format import GraphBuilder, save
    from serving.errors import ModelLoadError
    from serving.metrics import Metrics
    from serving.model import ServedModel

    b = GraphBuilder("transposed")
    x = b.input("x", np.float32, ["N", 3])
    b.output(b.node("Transpose", [x], outputs=["y"], perm=[1, 0]), np.float32, ["N", 3])  # declared wrongly
    save(b.build(), tmp_path / "t.lite")

    def load(config):
        return ServedModel.load("t", 1, tmp_path / "t.lite", parse_config(config, "t"), device="numpy", instances=1,
                                max_queue_size=8, metrics=Metrics())

    with pytest.raises(ModelLoadError, match=r"output 'y' has shape \[3, 4\], not the batch first"):
        load({"max_batch_size": 4, "dynamic_batching": {}})
    assert load({"max_batch_size": 0}).state == "LOADING"


def test_a_model_warms_up_at_each_configured_batch_size_before_it_is_ready(tmp_path, monkeypatch):
    """1, the preferred sizes and max_batch_size each run once on zero inputs during the load,
    then the configured warmup requests; a request never pays for a shape's first run."""
    import lite
    from serving.metrics import Metrics
    from serving.model import ServedModel
    from tests.serving.conftest import identity_model

    path = identity_model(tmp_path / "m.lite")
    config = parse_config({"max_batch_size": 16, "dynamic_batching": {"preferred_batch_sizes": [4]},
                           "warmup": {"batch_size": 2, "count": 2}}, "m")
    seen: list[int] = []
    original = lite.Model.predict

    def recording(self, inputs, *args, **kwargs):
        seen.append(next(iter(inputs.values())).shape[0])
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(lite.Model, "predict", recording)
    served = ServedModel.load("m", 1, path, config, device="numpy", instances=1, max_queue_size=8,
                              metrics=Metrics())
    assert sorted(seen) == [1, 2, 2, 4, 16]
    assert served.state == "LOADING"  # READY once started


def test_a_state_that_shares_the_batch_by_name_warms_up_at_the_batch_of_the_request(tmp_path):
    """Silero VAD's signature: audio [batch, T] and a recurrent state [2, batch, 128]. The converter
    records the sizes its verification ran on, at batch 2; the warm-up's zeros of batch 1 give the
    state batch 1 too, or the model's signature check refuses them."""
    from lite.format import GraphBuilder, save
    from lite.signature import SAMPLE_SHAPES_KEY
    from serving.metrics import Metrics
    from serving.model import ServedModel

    b = GraphBuilder("vad")
    b.input("input", np.float32, ["batch", "sequence"])
    state = b.input("state", np.float32, [2, "batch", 4])
    b.output(b.node("Identity", [state], outputs=["stateN"]), np.float32, [2, "batch", 4])
    metadata = {SAMPLE_SHAPES_KEY: '{"input": [2, 512], "state": [2, 2, 4]}'}
    save(b.build(metadata=metadata), tmp_path / "vad.lite")
    config = parse_config({"warmup": {"batch_size": 1, "count": 1}}, "vad")
    served = ServedModel.load("vad", 1, tmp_path / "vad.lite", config, device="numpy", instances=1,
                              max_queue_size=8, metrics=Metrics())
    assert served.state == "LOADING"
