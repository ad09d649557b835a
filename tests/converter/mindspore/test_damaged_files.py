"""Damaged, truncated and mismatched MINDIR and .ckpt files: always a typed ConverterError with a
message, never a crash. Includes a bounded hypothesis fuzz (a few hundred mutations each)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import converter
from converter.mindspore import CheckpointImportError, MindIRFormatError, checkpoint_to_onnx, mindir_to_onnx
from converter.mindspore.checkpoint import read_checkpoint_file
from tests.converter.mindspore.helpers import FIXTURES, KEY
from train.checkpoint import serialize

MINDIR = (FIXTURES / "ops_activations.mindir").read_bytes()
MINDIR_GCM = (FIXTURES / "ops_conv_gcm.mindir").read_bytes()
CKPT = (FIXTURES / "resnet.ckpt").read_bytes()
CKPT_NO_CRC = CKPT[:-17]  # without the crc_num appendix, so mutations reach the parser


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, value) edits: 0 flip a byte, 1 insert, 2 delete, 3 truncate."""
    buffer = bytearray(data)
    for kind, position, value in edits:
        if not buffer:
            break
        index = position % len(buffer)
        if kind == 0:
            buffer[index] ^= value or 1
        elif kind == 1:
            buffer.insert(index, value)
        elif kind == 2:
            del buffer[index]
        else:
            del buffer[index:]
    return bytes(buffer)


EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4)
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@FUZZ
@given(EDITS)
def test_fuzz_mindir(tmp_path_factory, edits):
    path = tmp_path_factory.mktemp("fuzz") / "model.mindir"
    path.write_bytes(_mutate(MINDIR, edits))
    try:
        mindir_to_onnx(path)
    except converter.ConverterError as err:
        assert str(err)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(EDITS)
def test_fuzz_encrypted_mindir(tmp_path_factory, edits):
    path = tmp_path_factory.mktemp("fuzz") / "model.mindir"
    path.write_bytes(_mutate(MINDIR_GCM, edits))
    try:
        mindir_to_onnx(path, dec_key=KEY)
    except converter.ConverterError as err:
        assert str(err)


@FUZZ
@given(EDITS, st.booleans())
def test_fuzz_ckpt(tmp_path_factory, edits, with_crc):
    path = tmp_path_factory.mktemp("fuzz") / "net.ckpt"
    path.write_bytes(_mutate(CKPT if with_crc else CKPT_NO_CRC, edits))
    try:
        read_checkpoint_file(path, None, None)
    except converter.ConverterError as err:
        assert str(err)


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.3, 0.5, 0.9, 0.999])
def test_truncated_mindir(tmp_path, fraction):
    path = tmp_path / "cut.mindir"
    path.write_bytes(MINDIR[: int(len(MINDIR) * fraction)])
    with pytest.raises(MindIRFormatError, match="cut.mindir"):
        mindir_to_onnx(path)


@pytest.mark.parametrize("fraction", [0.01, 0.3, 0.5, 0.9, 0.999])
def test_truncated_ckpt(tmp_path, fraction):
    path = tmp_path / "cut.ckpt"
    path.write_bytes(CKPT[: int(len(CKPT) * fraction)])
    with pytest.raises(CheckpointImportError, match="cut.ckpt"):
        read_checkpoint_file(path, None, None)


def test_ckpt_crc_mismatch_is_named(tmp_path):
    damaged = bytearray(CKPT)
    damaged[100] ^= 0xFF
    path = tmp_path / "bad.ckpt"
    path.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointImportError, match="CRC mismatch"):
        read_checkpoint_file(path, None, None)


def test_not_a_mindir(tmp_path):
    path = tmp_path / "text.mindir"
    path.write_text("hello, this is not a model")
    with pytest.raises(MindIRFormatError, match="not a MINDIR model"):
        converter.convert_model(path)


def test_split_tensor_slices_and_strings_load(tmp_path):
    """Tensors split into several values with one tag, and string entries (own writer: MindSpore
    splits only above 512 MiB)."""
    rng = np.random.default_rng(0)
    from train.models import LeNet5

    net = LeNet5()
    values = {name: rng.normal(size=p.shape).astype(np.float32) for name, p in net.parameters_dict().items()}
    content = serialize([*values.items(), ("note", "ünïcode"), ("epoch_num", np.int32(2))], crc_check=True, slice_bytes=1000)
    content_tags = content.count(b"fc1.weight")
    assert content_tags > 10  # fc1.weight (48000 floats) is written as many slices
    path = tmp_path / "sliced.ckpt"
    path.write_bytes(content)
    loaded = read_checkpoint_file(path, None, None)
    assert loaded["note"] == "ünïcode"
    np.testing.assert_array_equal(loaded["fc1.weight"], values["fc1.weight"])
    proto, facts = checkpoint_to_onnx(path, "train.models:LeNet5", (1, 1, 32, 32))
    assert "note" in facts["skipped"] and proto.graph.node


def test_ckpt_that_does_not_fit_the_network(tmp_path):
    with pytest.raises(CheckpointImportError, match="missing from the checkpoint.*conv1.weight"):
        checkpoint_to_onnx(FIXTURES / "lenet.ckpt", "tests.converter.mindspore.networks:small_resnet", (1, 3, 16, 16))


def test_ckpt_with_unknown_tensor_is_refused(tmp_path):
    from train.checkpoint import parse

    entries = list(parse(CKPT).items()) + [("extra.weight", np.zeros(3, np.float32))]
    path = tmp_path / "extra.ckpt"
    path.write_bytes(serialize(entries))
    with pytest.raises(CheckpointImportError, match="not in the network: extra.weight"):
        checkpoint_to_onnx(path, "tests.converter.mindspore.networks:small_resnet", (1, 3, 16, 16))


@pytest.mark.parametrize(
    "network, message",
    [("nowhere", "expected module:Callable"), ("no_such_module:X", "cannot import"),
     ("train.models:Nope", "no attribute"), ("numpy:zeros", "calling zeros\\(\\) failed")],
)
def test_bad_network_definitions(network, message):
    with pytest.raises(converter.ModelImportError, match=message):
        checkpoint_to_onnx(FIXTURES / "lenet.ckpt", network, (1, 1, 32, 32))


def test_crc_appendix_is_detected():
    assert CKPT[-17:-10] == b"crc_num"
    assert int.from_bytes(CKPT[-10:], "big") == zlib.crc32(CKPT[:-17])


@pytest.mark.parametrize("content", [b"abc", b"\xff\xff\xff\xff"])
def test_damaged_string_entry(tmp_path, content):
    from train._generated import checkpoint_pb2

    message = checkpoint_pb2.Checkpoint()
    value = message.value.add(tag="note")
    value.tensor.dims.append(0)
    value.tensor.tensor_type = "str"
    value.tensor.tensor_content = content
    path = tmp_path / "str.ckpt"
    path.write_bytes(message.SerializeToString())
    with pytest.raises(CheckpointImportError, match="string entry 'note'"):
        read_checkpoint_file(path, None, None)
