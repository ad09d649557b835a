"""converter.external_data: weights in files beside the model are read from its folder only.

A hostile model names a location outside its folder (``..``, an absolute path, a symlink) to
make the converter copy another file into the weights it writes; every route into the
converter (path, bytes, ModelProto, the CLI) must refuse it with the same typed error.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter import cli
from converter.errors import ConverterError, ModelImportError
from lite.format import to_bytes

SECRET = b"SECRET-PASSWORD!"  # 16 bytes: four float32 weights


def _model(location: str, offset: int | None = None, length: int | None = None, count: int = 4) -> onnx.ModelProto:
    """y = x + w, where w (float32[count]) lives in external data at ``location``."""
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[count], data_location=TensorProto.EXTERNAL)
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            weight.external_data.add(key=key, value=str(value))
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def layout(tmp_path):
    """tmp/secret.bin outside the model's folder tmp/model/; returns (model folder, secret path)."""
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    return folder, secret


def _routes(proto: onnx.ModelProto, folder):
    """(description, source, keyword arguments) for each way a model reaches the converter."""
    path = folder / "m.onnx"
    onnx.save(proto, path)
    return [
        ("path", path, {}),
        ("bytes with its folder", proto.SerializeToString(), {"external_data_dir": folder}),
        ("ModelProto with its folder", proto, {"external_data_dir": folder}),
    ]


def _hostile_locations(folder, secret) -> dict[str, str]:
    (folder / "link.bin").symlink_to(secret)
    return {"parent": "../secret.bin", "absolute": str(secret), "symlink": "link.bin", "nested": "sub/../../secret.bin"}


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink", "nested"])
def test_locations_outside_the_model_folder_are_refused_on_every_route(layout, kind):
    folder, secret = layout
    location = _hostile_locations(folder, secret)[kind]
    for route, source, options in _routes(_model(location), folder):
        with pytest.raises(ModelImportError) as caught:
            converter.convert_model(source, **options)
        message = str(caught.value)
        assert "'w'" in message and location in message, (route, message)


def test_in_memory_models_need_an_explicit_folder_and_never_use_the_working_directory(layout, monkeypatch):
    folder, _ = layout
    (folder / "weights.bin").write_bytes(SECRET)
    monkeypatch.chdir(folder)  # the data file would be found relative to the working directory
    proto = _model("weights.bin")
    for source in (proto, proto.SerializeToString()):
        with pytest.raises(ModelImportError, match="external_data_dir"):
            converter.convert_model(source)


def test_in_memory_models_read_external_data_from_the_folder_given(layout, tmp_path):
    folder, _ = layout
    weights = np.array([1, 2, 3, 4], np.float32)
    (folder / "weights.bin").write_bytes(b"\0" * 8 + weights.tobytes())
    proto = _model("weights.bin", offset=8, length=16)
    for source in (proto, proto.SerializeToString()):
        report = converter.convert(source, tmp_path / "m.lite", external_data_dir=folder)
        assert report.verification.passed
        lite_model = converter.convert_model(source, external_data_dir=folder)
        assert weights.tobytes() in to_bytes(lite_model)


@pytest.mark.parametrize(
    ("location", "offset", "length", "expected"),
    [
        ("missing.bin", None, None, "does not exist"),
        ("weights.bin", 8, None, "beyond the end"),
        ("weights.bin", None, 12, "length 12"),
        ("", None, None, "relative path"),
        ("sub", None, None, "not a regular file"),
    ],
)
def test_bad_external_data_is_a_typed_error_naming_tensor_and_location(layout, location, offset, length, expected):
    folder, _ = layout
    (folder / "weights.bin").write_bytes(SECRET)
    (folder / "sub").mkdir()
    for route, source, options in _routes(_model(location, offset, length), folder):
        with pytest.raises(ModelImportError, match=expected) as caught:
            converter.convert_model(source, **options)
        assert "tensor 'w'" in str(caught.value) and repr(location) in str(caught.value), route


def test_a_negative_offset_is_refused_naming_the_tensor(layout):
    folder, _ = layout
    (folder / "weights.bin").write_bytes(SECRET)
    for route, source, options in _routes(_model("weights.bin", offset=-4), folder):
        with pytest.raises(ModelImportError, match="offset must be non-negative, got -4 for tensor 'w'"):
            converter.convert_model(source, **options)


@pytest.mark.timeout(30)
def test_a_fifo_as_external_data_is_refused_without_blocking(layout):
    folder, _ = layout
    os.mkfifo(folder / "weights.bin")
    with pytest.raises(ModelImportError, match="not a regular file"):
        converter.convert_model(_routes(_model("weights.bin"), folder)[0][1])


def test_a_relative_model_path_in_the_working_directory_is_checked_too(layout, monkeypatch):
    folder, _ = layout
    onnx.save(_model("../secret.bin"), folder / "m.onnx")
    monkeypatch.chdir(folder)
    with pytest.raises(ModelImportError, match="relative path inside"):
        converter.convert_model("m.onnx")


def test_cli_refuses_with_one_line_and_writes_nothing(layout, capsys):
    folder, _ = layout
    source = folder / "m.onnx"
    onnx.save(_model("../secret.bin"), source)
    output = folder / "out.lite"
    assert cli.main(["convert", str(source), "-o", str(output), "--no-verify"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite convert: error:") and err.count("\n") == 1 and "'w'" in err
    assert not output.exists()


def test_refusal_is_a_converter_error_and_a_value_error(layout):
    folder, _ = layout
    with pytest.raises(ConverterError) as caught:
        converter.convert_model(_model("../secret.bin").SerializeToString(), external_data_dir=folder)
    assert isinstance(caught.value, ValueError) and not isinstance(caught.value, OSError)


def test_inline_weights_are_unaffected(tmp_path):
    proto = _model("unused")
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones(4, np.float32), "w"))
    assert converter.convert(proto.SerializeToString(), tmp_path / "m.lite").verification.passed


def _linked_layout(root, *, blobs: str = "blobs", snapshots: str = "snapshots"):
    """``root/<snapshots>/rev/model.onnx`` and its data as links into ``root/<blobs>/``, as the
    Hugging Face hub cache stores a download; returns the snapshot's model path and the weights."""
    weights = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    (root / blobs).mkdir(parents=True)
    (root / snapshots / "rev").mkdir(parents=True)
    (root / blobs / "9c2e").write_bytes(weights.tobytes())
    (root / blobs / "3f1a").write_bytes(_model("model.onnx_data").SerializeToString())
    os.symlink(f"../../{blobs}/3f1a", root / snapshots / "rev" / "model.onnx")
    os.symlink(f"../../{blobs}/9c2e", root / snapshots / "rev" / "model.onnx_data")
    return root / snapshots / "rev" / "model.onnx", weights


def test_a_hugging_face_cache_snapshot_with_linked_data_converts_and_verifies(tmp_path):
    import lite

    model_path, weights = _linked_layout(tmp_path / "models--org--name")
    report = converter.convert(model_path, tmp_path / "m.lite")
    assert report.verification.passed, report.verification.to_dict()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(lite.Model.load(tmp_path / "m.lite").predict({"x": x})["y"], x + weights)


def test_links_into_a_linked_models_folder_are_refused_outside_that_layout(tmp_path):
    """Any folder of links into the folder a linked model resolves to would read files beside
    any model the user keeps; only a cache's snapshots/ -> blobs/ is accepted."""
    model_path, _ = _linked_layout(tmp_path / "elsewhere", blobs="home", snapshots="links")
    with pytest.raises(ModelImportError, match="outside the model's folder"):
        converter.convert(model_path, tmp_path / "m.lite")


def test_a_location_with_dotdot_is_refused_in_a_hub_cache_too(tmp_path):
    """The cache's links are followed, but a location the model file writes keeps the rules."""
    root = tmp_path / "models--org--name"
    model_path, _ = _linked_layout(root)
    (root / "blobs" / "3f1a").write_bytes(_model("../../blobs/9c2e").SerializeToString())
    with pytest.raises(ModelImportError, match="without '..'"):
        converter.convert(model_path, tmp_path / "m.lite")
