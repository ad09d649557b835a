"""The .lite format: write -> read round trips, zero-copy loading, atomic writes, versions."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from lite.errors import ModelFormatError
from lite.format import GraphBuilder, ir, load, save, to_bytes
from lite.format.dtypes import DataType, pack_subbyte, unpack_subbyte
from lite.format.writer import ALIGNMENT
from tests.lite.strategies import models


def tiny_model(weight: np.ndarray | None = None) -> ir.Model:
    b = GraphBuilder("tiny")
    x = b.input("x", np.float32, ["N", 4])
    w = b.constant("w", np.arange(8, dtype=np.float32).reshape(4, 2) if weight is None else weight)
    y = b.node("MatMul", [x, w], outputs=["y"])
    b.output(y, np.float32, ["N", 2])
    return b.build({"producer": "tests"})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models())
def test_random_models_round_trip_exactly(model):
    data = to_bytes(model)
    again = load(data)
    assert to_bytes(again) == data
    assert again.metadata == model.metadata
    assert again.opset_imports == model.opset_imports
    for original, read in zip(model.graphs, again.graphs):
        assert [t.name for t in read.tensors] == [t.name for t in original.tensors]
        assert [t.shape for t in read.tensors] == [t.shape for t in original.tensors]
        assert read.inputs == original.inputs and read.outputs == original.outputs
        for a, b in zip(original.tensors, read.tensors):
            if a.is_constant and a.dtype != DataType.STRING:
                assert np.asarray(a.data).tobytes() == np.asarray(b.data).tobytes()


def test_weights_are_aligned_read_only_views_of_the_mapped_file(tmp_path):
    path = tmp_path / "m.lite"
    save(tiny_model(), path)
    model = load(path)
    weight = model.main.tensors[1].data
    assert not weight.flags.writeable
    assert not weight.flags.owndata
    raw = path.read_bytes()
    flatbuffer_end = 4 + int.from_bytes(raw[:4], "little")
    data_start = -(-flatbuffer_end // ALIGNMENT) * ALIGNMENT
    offset = raw.index(weight.tobytes(), data_start)
    assert offset % ALIGNMENT == 0
    np.testing.assert_array_equal(weight, np.arange(8, dtype=np.float32).reshape(4, 2))


def test_a_byte_changed_inside_a_weight_fails_the_checksum_when_asked(tmp_path):
    path = tmp_path / "m.lite"
    save(tiny_model(), path)
    assert load(path, check_weights=True).main.tensors[1].data is not None
    raw = bytearray(path.read_bytes())
    offset = raw.index(np.arange(8, dtype=np.float32).tobytes())
    raw[offset + 5] ^= 0x01  # the structure stays sound: only a weight's value changes
    path.write_bytes(bytes(raw))
    assert load(path).main.tensors[1].data[0, 1] != 1.0  # unchecked, it loads with the changed value
    for source in (path, bytes(raw)):
        with pytest.raises(ModelFormatError, match="do not match the checksum written with the file"):
            load(source, check_weights=True)


def test_files_written_before_the_weights_checksum_load_with_the_check_on():
    model = load(os.path.join(os.path.dirname(__file__), "..", "format", "qdq_v2_0.lite"), check_weights=True)
    assert model.main.nodes


def test_loading_does_not_copy_weights(tmp_path):
    path = tmp_path / "big.lite"
    save(tiny_model(np.ones((4, 2_000_000), np.float32)), path)  # 32 MB of weights
    tracemalloc.start()
    model = load(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert model.main.tensors[1].data.shape == (4, 2_000_000)
    assert peak < 1_000_000


def test_save_is_atomic_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "m.lite"
    save(tiny_model(), path)
    before = path.read_bytes()

    class Boom(RuntimeError):
        pass

    import lite.format.data_section as data_section

    def explode(*args, **kwargs):
        raise Boom("disk full")

    monkeypatch.setattr(data_section, "write", explode)
    with pytest.raises(Boom):
        save(tiny_model(np.zeros((4, 2), np.float32)), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.lite"]


def test_killed_writer_never_leaves_a_partial_file(tmp_path):
    path = tmp_path / "m.lite"
    script = (
        "import numpy as np, sys\n"
        "sys.path.insert(0, %r)\n"
        "from tests.lite.test_format import tiny_model\n"
        "from lite.format import save\n"
        "import lite.format.data_section as w\n"
        "def slow(handle, header, payloads):\n"
        "    handle.write(header[:10]); handle.flush(); print('writing', flush=True); import time; time.sleep(30)\n"
        "w.write = slow\n"
        "save(tiny_model(), %r)\n" % (os.getcwd(), str(path))
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"writing"
    proc.kill()
    proc.wait()
    assert not path.exists()


def test_newer_major_version_is_rejected_with_the_supported_version():
    model = tiny_model()
    model.version = (3, 0)
    with pytest.raises(ModelFormatError, match=r"format version 3\.0 is not supported.*major versions 1 to 2"):
        load(to_bytes(model))


def test_newer_minor_version_is_read():
    model = tiny_model()
    model.version = (1, 7)
    assert load(to_bytes(model)).version == (1, 7)


def test_subbyte_round_trip():
    values = np.array([-8, -1, 0, 7, 3], dtype=np.int8)
    packed = pack_subbyte(values, DataType.INT4)
    assert packed.tolist() == [0xF8, 0x70, 0x03]
    np.testing.assert_array_equal(unpack_subbyte(packed, DataType.INT4, (5,)), values)
    b = GraphBuilder("q")
    b.graph.tensors.append(ir.Tensor("w", DataType.INT4, (5,), packed))
    model = load(to_bytes(b.build()))
    assert model.main.tensors[0].data.tobytes() == packed.tobytes()


def test_writer_rejects_data_that_does_not_match_the_declared_type():
    b = GraphBuilder("bad")
    b.graph.tensors.append(ir.Tensor("w", DataType.FLOAT, (2, 2), np.zeros(4, np.float64)))
    with pytest.raises(ModelFormatError, match="'w'.*float64.*FLOAT is stored as float32"):
        to_bytes(b.build())


def test_quantization_parameters_round_trip():
    b = GraphBuilder("q")
    quant = ir.QuantParams(np.array([0.1, 0.2, 0.3], np.float32), np.zeros(3, np.int64), axis=0, symmetric=True)
    b.graph.tensors.append(ir.Tensor("w", DataType.INT8, (3, 4), np.zeros((3, 4), np.int8), quant))
    blocked = ir.QuantParams(np.full(6, 0.5, np.float32), np.zeros(6, np.int64), axis=1, block_size=2, bits=4)
    b.graph.tensors.append(ir.Tensor("v", DataType.INT4, (3, 4), np.zeros(6, np.uint8), blocked))
    model = load(to_bytes(b.build()))
    w, v = model.main.tensors
    assert w.quant.axis == 0 and w.quant.symmetric and w.quant.block_size == 0
    np.testing.assert_allclose(w.quant.scale, [0.1, 0.2, 0.3])
    assert v.quant.block_size == 2 and v.quant.bits == 4 and v.quant.axis == 1
