"""Calibration data readers: .npy/.npz folders, image folders with a preprocessing spec, iterables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from converter.quantize.data import InputSpec, batches
from converter.quantize.errors import CalibrationDataError

INPUTS = [InputSpec("input", np.dtype(np.float32), ("N", 1, 8, 8))]


def test_npy_folder_mixes_single_samples_and_batches_and_rebatches(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "a.npy", rng.random((5, 1, 8, 8), np.float32))
    np.save(tmp_path / "b.npy", rng.random((1, 8, 8), np.float32))  # one sample, no batch dimension
    sizes = [b.size for b in batches(tmp_path, INPUTS, batch_size=4, limit=100)]
    assert sizes == [4, 2]


def test_npz_labels_and_limit(tmp_path):
    np.savez(tmp_path / "eval.npz", input=np.zeros((10, 1, 8, 8), np.float32), label=np.arange(10))
    got = list(batches(tmp_path, INPUTS, batch_size=4, limit=6))
    assert [b.size for b in got] == [4, 2]
    np.testing.assert_array_equal(np.concatenate([b.labels for b in got]), np.arange(6))


def test_fixed_batch_models_get_padded_batches(tmp_path):
    fixed = [InputSpec("input", np.dtype(np.float32), (4, 1, 8, 8))]
    got = list(batches([np.zeros((6, 1, 8, 8), np.float32)], fixed, batch_size=16, limit=100))
    assert [b.feeds["input"].shape[0] for b in got] == [4, 4] and [b.size for b in got] == [4, 2]


def test_shape_mismatch_names_file_input_and_expected_shape(tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((2, 1, 9, 8), np.float32))
    with pytest.raises(CalibrationDataError, match=r"bad.npy.*'input'.*axis 2.*expects 8"):
        list(batches(tmp_path, INPUTS, 4, 10))


def test_image_folder_uses_the_preprocessing_spec_and_class_folders(tmp_path):
    from PIL import Image

    for label, value in (("cat", 0), ("dog", 255)):
        (tmp_path / label).mkdir()
        Image.fromarray(np.full((12, 10), value, np.uint8)).save(tmp_path / label / "x.png")
    spec = {"resize": 8, "crop": 8, "mean": [0.5], "std": [0.5], "color": "L"}
    (got,) = batches(tmp_path, INPUTS, 4, 10, spec)
    assert got.feeds["input"].shape == (2, 1, 8, 8)
    np.testing.assert_allclose(got.feeds["input"][0], -1.0)
    np.testing.assert_allclose(got.feeds["input"][1], 1.0)
    np.testing.assert_array_equal(got.labels, [0, 1])
    assert json.loads(json.dumps(spec)) == spec


def test_iterables_of_arrays_dicts_and_pairs():
    x = np.zeros((3, 1, 8, 8), np.float32)
    items = [x, {"input": x[0]}, (x, np.array([1, 2, 3]))]
    got = list(batches(items, INPUTS, 16, 100))
    assert got[0].size == 7 and got[0].labels is None


def test_empty_folder_says_what_calibration_data_is(tmp_path):
    with pytest.raises(CalibrationDataError, match="found no .npy/.npz or image files"):
        list(batches(tmp_path, INPUTS, 4, 10))


def test_inputs_without_a_batch_axis_are_the_same_for_every_sample(tmp_path):
    # A scalar (a temperature, a Loop's trip count) and a per-channel vector [8] beside x[N, 8].
    inputs = [InputSpec("x", np.dtype(np.float32), ("N", 8)), InputSpec("t", np.dtype(np.float32), ()),
              InputSpec("s", np.dtype(np.float32), (8,))]
    np.savez(tmp_path / "0.npz", x=np.ones((3, 8), np.float32), t=np.array(0.5, np.float32), s=np.arange(8, dtype=np.float32))
    np.savez(tmp_path / "1.npz", x=np.ones((2, 8), np.float32), t=np.array(0.5, np.float32),
             s=np.arange(8, dtype=np.float32)[None])  # a leading axis of 1 is taken off
    got = list(batches(tmp_path, inputs, batch_size=4, limit=100))
    assert [b.size for b in got] == [4, 1]
    assert got[0].feeds["x"].shape == (4, 8) and got[0].feeds["t"].shape == () and got[0].feeds["s"].shape == (8,)


def test_a_state_given_once_beside_a_run_of_inputs_is_repeated(tmp_path):
    # A recurrent model's call recorded as one file: 5 frames, and its initial state once.
    inputs = [InputSpec("x", np.dtype(np.float32), ("N", 8)), InputSpec("h", np.dtype(np.float32), ("N", 1, 4))]
    np.savez(tmp_path / "call.npz", x=np.ones((5, 8), np.float32), h=np.zeros((1, 1, 4), np.float32))
    got = list(batches(tmp_path, inputs, batch_size=4, limit=100))
    assert [b.size for b in got] == [4, 1] and got[0].feeds["h"].shape == (4, 1, 4)


def test_inputs_with_different_numbers_of_rows_are_named(tmp_path):
    inputs = [InputSpec("x", np.dtype(np.float32), ("N", 8)), InputSpec("y", np.dtype(np.float32), ("N", 8))]
    np.savez(tmp_path / "bad.npz", x=np.ones((3, 8), np.float32), y=np.ones((2, 8), np.float32))
    with pytest.raises(CalibrationDataError, match=r"bad.npz.*different numbers of samples \(x 3, y 2\)"):
        list(batches(tmp_path, inputs, 4, 10))


def test_an_npz_of_python_objects_says_to_save_text_as_strings(tmp_path):
    inputs = [InputSpec("text", np.dtype(object), ("N", 1))]
    np.savez(tmp_path / "words.npz", text=np.array([["a cat"], ["a dog"]], dtype=object))
    with pytest.raises(CalibrationDataError, match=r"words.npz: holds an array of Python objects.*dtype=str"):
        list(batches(tmp_path, inputs, 4, 10))
