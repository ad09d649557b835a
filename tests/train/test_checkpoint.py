"""MindSpore .ckpt: round trips, wire details (slices, strings, scalars, CRC), strict loading, atomicity."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from train import CheckpointError, Tensor, load_checkpoint, load_param_into_net, nn, save_checkpoint, set_seed
from train._generated import checkpoint_pb2
from train.checkpoint import parse, read_checkpoint, serialize
from train.models import LeNet5, resnet18


def test_round_trip_gives_identical_outputs(tmp_path):
    set_seed(0)
    net = resnet18(num_classes=4, in_channels=1, width=4, small_input=True)
    net.set_train(True)
    net(
        Tensor(np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32))
    )  # moving stats move
    path = save_checkpoint(net, tmp_path / "resnet")
    assert path == tmp_path / "resnet.ckpt"
    fresh = resnet18(num_classes=4, in_channels=1, width=4, small_input=True)
    params = load_checkpoint(path, net=fresh, strict_load=True)
    assert list(params) == list(net.parameters_dict())
    x = Tensor(np.random.default_rng(1).standard_normal((2, 1, 8, 8)).astype(np.float32))
    net.set_train(False)
    np.testing.assert_array_equal(net(x).asnumpy(), fresh(x).asnumpy())


def test_file_is_a_sequence_of_one_value_checkpoints(tmp_path):
    net = LeNet5()
    data = save_checkpoint(net, tmp_path / "lenet.ckpt").read_bytes()
    message = checkpoint_pb2.Checkpoint()
    message.ParseFromString(data)
    first = message.value[0]
    assert first.tag == "conv1.weight"
    assert list(first.tensor.dims) == [6, 1, 5, 5] and first.tensor.tensor_type == "Float32"
    assert first.tensor.tensor_content == net.conv1.weight.data.tobytes()
    single = checkpoint_pb2.Checkpoint()
    single.value.add().CopyFrom(first)
    assert data.startswith(single.SerializeToString())


def test_large_tensors_are_split_into_values_with_the_same_tag():
    array = np.arange(1000, dtype=np.float32).reshape(10, 100)
    content = serialize([("big", array), ("small", np.ones(2, np.int64))], slice_bytes=1024)
    message = checkpoint_pb2.Checkpoint()
    message.ParseFromString(content)
    assert [v.tag for v in message.value].count("big") == 4
    assert all(list(v.tensor.dims) == [10, 100] for v in message.value if v.tag == "big")
    values = parse(content)
    np.testing.assert_array_equal(values["big"], array)
    assert values["small"].dtype == np.int64


def test_strings_scalars_and_append_dict(tmp_path):
    path = save_checkpoint(
        {"w": np.ones(3, np.float16)},
        tmp_path / "a.ckpt",
        append_dict={"epoch_num": 7, "lr": 0.5, "note": "résumé ✓", "flag": True},
    )
    values = read_checkpoint(path)
    assert values["note"] == "résumé ✓"
    assert values["epoch_num"].shape == () and values["epoch_num"] == 7
    assert values["lr"].dtype == np.float32 and values["flag"].dtype == np.bool_
    assert values["w"].dtype == np.float16
    message = checkpoint_pb2.Checkpoint()
    message.ParseFromString(path.read_bytes())
    note = next(v for v in message.value if v.tag == "note").tensor
    assert note.tensor_type == "str" and list(note.dims) == [0]
    assert note.tensor_content == np.array("résumé ✓").tobytes()


def test_scalar_written_with_dims_zero_reads_as_scalar_and_bfloat16_widens():
    message = checkpoint_pb2.Checkpoint()
    item = message.value.add()
    item.tag = "step"
    item.tensor.dims.append(0)
    item.tensor.tensor_type = "Int32"
    item.tensor.tensor_content = np.int32(5).tobytes()
    bf = message.value.add()
    bf.tag = "bf"
    bf.tensor.dims.append(2)
    bf.tensor.tensor_type = "BFloat16"
    bf.tensor.tensor_content = (
        (np.array([1.5, -2.0], np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    )
    values = parse(message.SerializeToString())
    assert values["step"].shape == () and values["step"] == 5
    assert values["bf"].tolist() == [1.5, -2.0]


def test_crc_appendix_written_checked_and_required(tmp_path):
    path = save_checkpoint({"w": np.arange(4.0)}, tmp_path / "c", crc_check=True)
    data = path.read_bytes()
    assert data[-17:-10] == b"crc_num"
    assert int.from_bytes(data[-10:], "big") == zlib.crc32(data[:-17])
    np.testing.assert_array_equal(load_checkpoint(path, crc_check=True)["w"].asnumpy(), np.arange(4.0))
    damaged = bytearray(data)
    damaged[20] ^= 0xFF
    (tmp_path / "d.ckpt").write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError, match="CRC mismatch"):
        load_checkpoint(tmp_path / "d.ckpt")
    plain = save_checkpoint({"w": np.arange(4.0)}, tmp_path / "p")
    with pytest.raises(CheckpointError, match="no crc_num"):
        load_checkpoint(plain, crc_check=True)


def test_damaged_files_raise_checkpoint_errors(tmp_path):
    path = save_checkpoint(LeNet5(), tmp_path / "t")
    (tmp_path / "trunc.ckpt").write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match=r"trunc\.ckpt"):
        load_checkpoint(tmp_path / "trunc.ckpt")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_checkpoint(tmp_path / "missing.ckpt")
    lying = checkpoint_pb2.Checkpoint()
    item = lying.value.add()
    item.tag = "w"
    item.tensor.dims.extend([1 << 40, 1 << 20])
    item.tensor.tensor_type = "Float32"
    item.tensor.tensor_content = b"\0" * 8
    with pytest.raises(CheckpointError, match="damaged or truncated"):
        parse(lying.SerializeToString())
    item.tensor.tensor_type = "Int4"
    with pytest.raises(CheckpointError, match="not supported"):
        parse(lying.SerializeToString())


def test_load_param_into_net_lists_missing_extra_and_mis_shaped():
    net = nn.SequentialCell([nn.Dense(3, 2), nn.Dense(2, 1)])
    values = {
        "0.weight": np.zeros((2, 3)),
        "0.bias": np.zeros(5),
        "1.weight": np.zeros((1, 2)),
        "other": np.ones(1),
    }
    with pytest.raises(CheckpointError) as info:
        load_param_into_net(net, values, strict_load=True)
    message = str(info.value)
    assert "missing from the checkpoint: 1.bias" in message
    assert "not in the network: other" in message
    assert "0.bias (checkpoint (5,), network (2,))" in message
    values["0.bias"] = np.ones(2)
    not_loaded, unused = load_param_into_net(net, values)
    assert (not_loaded, unused) == (["1.bias"], ["other"])
    assert net.parameters_dict()["0.bias"].data.dtype == np.float32
    np.testing.assert_array_equal(net.parameters_dict()["0.bias"].data, [1, 1])


def test_filters_and_choice_func(tmp_path):
    path = save_checkpoint(LeNet5(), tmp_path / "f", choice_func=lambda n: not n.startswith("fc3"))
    names = list(load_checkpoint(path))
    assert "fc3.weight" not in names and "conv1.weight" in names
    assert list(load_checkpoint(path, specify_prefix="conv")) == ["conv1.weight", "conv2.weight"]
    assert "conv1.weight" not in load_checkpoint(path, filter_prefix=("conv1", "fc1"))


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path, monkeypatch):
    path = save_checkpoint({"w": np.ones(2)}, tmp_path / "atomic")
    before = path.read_bytes()

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr("train.checkpoint.os.replace", fail)
    with pytest.raises(OSError):
        save_checkpoint({"w": np.zeros(2)}, tmp_path / "atomic")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic.ckpt"]


def test_bad_save_objects_are_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="cannot save"):
        save_checkpoint(42, tmp_path / "x")
    with pytest.raises(CheckpointError, match="dtype"):
        save_checkpoint({"c": np.ones(2, np.complex64)}, tmp_path / "x")
    save_checkpoint([{"name": "a", "data": Tensor(np.ones(1, np.float32))}], tmp_path / "list")
    assert list(load_checkpoint(tmp_path / "list.ckpt")) == ["a"]


def test_no_pickle_in_the_package():
    root = Path(__file__).resolve().parents[2] / "train"
    for source in root.rglob("*.py"):
        text = source.read_text()
        assert "import pickle" not in text and "allow_pickle=True" not in text, source


def test_a_name_that_is_not_utf8_is_a_checkpoint_error_with_either_protobuf_decoder(tmp_path):
    """protobuf's pure-Python decoder (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, which
    importing onnxruntime-extensions sets for the whole process) raises UnicodeDecodeError for a
    string field that is not UTF-8: it escaped untyped."""
    import os
    import subprocess
    import sys

    content = serialize([("abcd", np.ones(3, np.float32))])
    assert content.count(b"abcd") == 1
    path = tmp_path / "bad.ckpt"
    path.write_bytes(content.replace(b"abcd", b"\xff\xfe\xfd\xfc"))
    script = ("import sys\nfrom train import CheckpointError\nfrom train.checkpoint import read_checkpoint\n"
              "try:\n    read_checkpoint(sys.argv[1])\n    print('read')\n"
              "except CheckpointError as err:\n    print('typed:', err)\n")
    for implementation in ("python", "upb"):
        environment = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation,
                       "PYTHONPATH": str(Path(__file__).parents[2])}
        result = subprocess.run([sys.executable, "-c", script, str(path)], env=environment, capture_output=True,
                                text=True, check=False)
        # The C decoder does not check a proto2 string's UTF-8: it reads the file.
        expected = "typed:" if implementation == "python" else ("typed:", "read")
        assert result.returncode == 0 and result.stdout.startswith(expected), (implementation, result.stderr[-500:])
