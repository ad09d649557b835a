"""Model.bind on host engines: fixed input buffers, a run per call, the same outputs dict (the CUDA
graph form is tested in test_cuda.py)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes


def affine() -> bytes:
    b = GraphBuilder("affine")
    x = b.input("x", np.float32, ["N", 4])
    w = b.constant("w", np.arange(8, dtype=np.float32).reshape(4, 2))
    y = b.node("MatMul", [x, w])
    y = b.node("Add", [y, b.constant("b", np.array([1.0, -1.0], np.float32))], outputs=["y"])
    b.output(y, np.float32, ["N", 2])
    return to_bytes(b.build())


DEVICES = ["numpy"] + (["cpu"] if importlib.util.find_spec("onnxruntime") else [])


@pytest.mark.parametrize("device", DEVICES)
def test_a_run_computes_what_is_written_into_the_buffers(device):
    model = lite.Model.load(affine(), device=device)
    rng = np.random.default_rng(0)
    first = rng.standard_normal((3, 4)).astype(np.float32)
    kept = first.copy()
    binding = model.bind({"x": first})
    outputs = binding.outputs
    np.testing.assert_allclose(binding.run()["y"], model.predict({"x": first})["y"], rtol=1e-6)
    for _ in range(3):
        batch = rng.standard_normal((3, 4)).astype(np.float32)
        binding.inputs["x"][...] = batch
        result = binding.run()
        assert result is outputs and binding.outputs is outputs  # one dict, every run
        np.testing.assert_allclose(result["y"], model.predict({"x": batch})["y"], rtol=1e-6)
    np.testing.assert_array_equal(first, kept)  # the example array is copied, never written


@pytest.mark.parametrize("device", DEVICES)
def test_a_buffer_replaced_by_assignment_is_used_if_it_keeps_shape_and_type(device):
    model = lite.Model.load(affine(), device=device)
    binding = model.bind({"x": np.zeros((2, 4), np.float32)})
    replacement = np.ones((2, 4), np.float32)
    binding.inputs["x"] = replacement
    np.testing.assert_allclose(binding.run()["y"], model.predict({"x": replacement})["y"])
    binding.inputs["x"] = np.ones((5, 4), np.float32)
    with pytest.raises(lite.InvalidInputError, match=r"bound input 'x' is now float32\[5, 4\]; it was bound as "
                                                     r"float32\[2, 4\]"):
        binding.run()
    binding.inputs["x"] = np.ones((2, 4), np.float64)
    with pytest.raises(lite.InvalidInputError, match="float64"):
        binding.run()


def test_binding_checks_the_examples_as_predict_does():
    model = lite.Model.load(affine(), device="numpy")
    with pytest.raises(lite.InvalidInputError, match="missing 'x'"):
        model.bind({"z": np.zeros((1, 4), np.float32)})
    with pytest.raises(lite.InvalidInputError):
        model.bind({"x": np.zeros((1, 5), np.float32)})
    binding = model.bind({"x": [[1.0, 2.0, 3.0, 4.0]]})  # a list becomes a buffer of the input's type
    assert binding.inputs["x"].dtype == np.float32 and binding.inputs["x"].shape == (1, 4)
    assert isinstance(binding, lite.Binding) and "x: (1, 4)" in repr(binding)


def test_inputs_removed_or_added_are_named():
    model = lite.Model.load(affine(), device="numpy")
    binding = model.bind({"x": np.zeros((2, 4), np.float32)})
    binding.inputs["extra"] = np.zeros(3, np.float32)
    with pytest.raises(lite.InvalidInputError, match="unknown 'extra'"):
        binding.run()
    del binding.inputs["extra"], binding.inputs["x"]
    with pytest.raises(lite.InvalidInputError, match="bound input 'x' was removed"):
        binding.run()
