"""Acceptance: files written by MindSpore 2.10 (tests/fixtures/mindspore, see its manifest)
convert to .lite and reproduce MindSpore's outputs within 1e-5: MINDIR, MindSpore's ONNX export,
and .ckpt + the equivalent network defined with the train core."""

from __future__ import annotations

import shutil

import pytest

import converter
from converter.mindspore import EncryptedModelError
from tests.converter.mindspore.helpers import FIXTURES, KEY, MANIFEST, assert_close, expected, run_lite

pytestmark = pytest.mark.skipif(not MANIFEST, reason="tests/fixtures/mindspore is missing")

MINDIR_CASES = ["lenet", "resnet", "ops_conv", "ops_activations", "ops_shapes"]


def _convert(source, tmp_path, **options):
    output = tmp_path / "model.lite"
    converter.convert(source, output, verify=False, **options)
    return output


def test_fixtures_come_from_mindspore():
    assert MANIFEST["mindspore_version"].startswith("2.")
    for name in MINDIR_CASES:
        assert f"{name}.mindir" in MANIFEST["files"]


@pytest.mark.parametrize("name", MINDIR_CASES)
def test_mindir_matches_mindspore(name, tmp_path):
    x, outputs = expected(name)
    assert_close(run_lite(_convert(FIXTURES / f"{name}.mindir", tmp_path), x), outputs)


@pytest.mark.parametrize("name", ["lenet", "resnet"])
def test_mindspore_onnx_export_matches_mindspore(name, tmp_path):
    x, outputs = expected(name)
    assert_close(run_lite(_convert(FIXTURES / f"{name}.onnx", tmp_path), x), outputs)


def test_mindspore_onnx_export_of_asymmetric_pads(tmp_path):
    """MindSpore 2.10's ONNX exporter copies Conv2D's ``pad`` (top, bottom, left, right) into ONNX
    ``pads`` (top, left, bottom, right) unchanged, so outputs behind the asymmetric 'pad' conv
    differ from MindSpore's in MindSpore's own ONNX file (ONNX Runtime agrees with us). Output 0
    (a 'same' conv) is exact; the rest must equal ONNX Runtime on the file as written."""
    onnxruntime = pytest.importorskip("onnxruntime")
    x, outputs = expected("ops_conv")
    got = run_lite(_convert(FIXTURES / "ops_conv.onnx", tmp_path), x)
    assert_close(got[:1], outputs[:1])
    session = onnxruntime.InferenceSession(str(FIXTURES / "ops_conv.onnx"))
    reference = session.run(None, {session.get_inputs()[0].name: x})
    assert_close(got, reference)
    assert got[1].shape != outputs[1].shape  # the exporter's pad order, not ours


@pytest.mark.parametrize(
    "name, network",
    [("lenet", "train.models:LeNet5"), ("resnet", "tests.converter.mindspore.networks:small_resnet")],
)
def test_mindspore_ckpt_with_train_network_matches_mindspore(name, network, tmp_path):
    x, outputs = expected(name)
    path = _convert(FIXTURES / f"{name}.ckpt", tmp_path, network=network, network_input_shape=x.shape)
    assert_close(run_lite(path, x), outputs)


def test_batchnorm_statistics_are_not_trivial():
    from train.checkpoint import read_checkpoint

    values = read_checkpoint(FIXTURES / "resnet.ckpt")
    assert abs(values["bn1.moving_mean"]).max() > 0.1
    assert abs(values["bn1.moving_variance"] - 1).max() > 0.1


def test_split_external_data_matches_mindspore(tmp_path):
    x, outputs = expected("ops_conv")
    assert_close(run_lite(_convert(FIXTURES / "ops_conv_split" / "ops_conv_graph.mindir", tmp_path), x), outputs)


def test_missing_external_data_is_a_clear_error(tmp_path):
    copy = tmp_path / "graph.mindir"
    shutil.copy(FIXTURES / "ops_conv_split" / "ops_conv_graph.mindir", copy)
    with pytest.raises(converter.ModelImportError, match="external data file .* is missing"):
        converter.convert_model(copy)


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_external_data_linked_out_of_the_models_folder_is_refused(tmp_path, linked):
    """A data file (or the whole variables folder) that is a symlink to a file outside the model's
    folder, even one with MindSpore's data header, is refused as ONNX external data is: its bytes
    would be copied into the written model."""
    model_dir = tmp_path / "model"
    shutil.copytree(FIXTURES / "ops_conv_split", model_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    data = bytearray((model_dir / "ops_conv_variables" / "data_0").read_bytes())
    data[64:] = b"A" * (len(data) - 64)
    (outside / "data_0").write_bytes(data)
    if linked == "file":
        (model_dir / "ops_conv_variables" / "data_0").unlink()
        (model_dir / "ops_conv_variables" / "data_0").symlink_to(outside / "data_0")
    else:
        shutil.rmtree(model_dir / "ops_conv_variables")
        (model_dir / "ops_conv_variables").symlink_to(outside)
    with pytest.raises(converter.ModelImportError, match="resolves to .*outside the model's folder"):
        converter.convert_model(model_dir / "ops_conv_graph.mindir")


def test_external_data_that_is_not_a_regular_file_is_refused(tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(FIXTURES / "ops_conv_split", model_dir)
    (model_dir / "ops_conv_variables" / "data_0").unlink()
    (model_dir / "ops_conv_variables" / "data_0").mkdir()
    with pytest.raises(converter.ModelImportError, match="is not a regular file"):
        converter.convert_model(model_dir / "ops_conv_graph.mindir")


@pytest.mark.parametrize("mode", ["gcm", "cbc"])
def test_encrypted_mindir_with_key(mode, tmp_path):
    x, outputs = expected("ops_conv")
    path = _convert(FIXTURES / f"ops_conv_{mode}.mindir", tmp_path, dec_key=KEY)
    assert_close(run_lite(path, x), outputs)


def test_encrypted_mindir_without_key_is_rejected():
    with pytest.raises(EncryptedModelError, match="encrypted .AES-GCM.*--dec-key"):
        converter.convert_model(FIXTURES / "ops_conv_gcm.mindir")


@pytest.mark.parametrize("mode", ["gcm", "cbc"])
def test_encrypted_mindir_with_wrong_key(mode):
    with pytest.raises(EncryptedModelError, match="wrong key"):
        converter.convert_model(FIXTURES / f"ops_conv_{mode}.mindir", dec_key=bytes(16))


def test_cli_converts_mindir_and_ckpt(tmp_path, capsys):
    from converter.cli import main

    assert main(["convert", str(FIXTURES / "lenet.mindir"), "-o", str(tmp_path / "a.lite"), "-q"]) == 0
    args = ["convert", "--ckpt", str(FIXTURES / "lenet.ckpt"), "--network", "train.models:LeNet5"]
    assert main([*args, "--input-shape", "1,1,32,32", "-o", str(tmp_path / "b.lite"), "-q"]) == 0
    x, outputs = expected("lenet")
    assert_close(run_lite(tmp_path / "b.lite", x), outputs)
    assert main(["convert", "--ckpt", str(FIXTURES / "lenet.ckpt"), "-o", str(tmp_path / "c.lite")]) == 2
    assert "--network" in capsys.readouterr().err
    key = ["--dec-key", KEY.hex(), "--dec-mode", "AES-CBC"]
    assert main(["convert", str(FIXTURES / "ops_conv_cbc.mindir"), *key, "-o", str(tmp_path / "d.lite"), "-q"]) == 0
