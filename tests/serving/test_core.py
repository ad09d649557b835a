"""The transport-free core in-process: datatypes, config, repository names, settings, logs (dynamic
batching: test_batcher.py)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from serving.config import DynamicBatching, VersionPolicy, parse_config
from serving.datatypes import decode_raw, encode_raw, serialize_bytes
from serving.errors import ConfigError, InvalidRequestError
from serving.repository import ModelRepository, check_model_name
from serving.settings import Settings

from .conftest import identity_model


def test_raw_round_trip_for_every_numeric_datatype():
    for datatype, dtype in [("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64), ("INT8", np.int8),
                            ("INT64", np.int64), ("UINT16", np.uint16), ("BOOL", np.bool_)]:
        array = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
        np.testing.assert_array_equal(decode_raw(encode_raw(array), datatype, (2, 3), "x"), array)


def test_bf16_decodes_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    np.testing.assert_array_equal(decode_raw(array.tobytes(), "BF16", (2,), "x"), array)


def test_bytes_tensors_are_length_prefixed():
    raw = serialize_bytes(np.array([b"ab", "c"], dtype=object))
    assert raw == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 1) + b"c"
    assert list(decode_raw(raw, "BYTES", (2,), "x")) == [b"ab", b"c"]
    with pytest.raises(InvalidRequestError, match="holds 2 elements, the shape needs 3"):
        decode_raw(raw, "BYTES", (3,), "x")


def test_bool_bytes_must_be_zero_or_one():
    with pytest.raises(InvalidRequestError, match="0 or 1"):
        decode_raw(b"\x02", "BOOL", (1,), "x")


def test_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({"max_batch": 4}, "cfg")
    with pytest.raises(ConfigError, match="needs max_batch_size > 0"):
        parse_config({"dynamic_batching": {}}, "cfg")
    with pytest.raises(ConfigError, match="exceed max_batch_size"):
        parse_config({"max_batch_size": 4, "dynamic_batching": {"preferred_batch_sizes": [8]}}, "cfg")
    config = parse_config({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 100},
                           "version_policy": {"specific": [1, 3]}}, "cfg")
    assert config.dynamic_batching == DynamicBatching(100, ())
    assert config.version_policy.select([1, 2, 3]) == [1, 3]
    assert parse_config({"threads": 1}, "cfg").threads == 1
    assert parse_config({}, "cfg").threads is None  # the server's --threads
    with pytest.raises(ConfigError, match="threads must be an integer >= 0"):
        parse_config({"threads": -1}, "cfg")


def test_version_policies():
    assert VersionPolicy().select([3, 1, 2]) == [3]
    assert VersionPolicy(latest=2).select([3, 1, 2]) == [2, 3]
    assert VersionPolicy(all=True).select([2, 1]) == [1, 2]


def test_model_names_cannot_leave_the_repository(tmp_path):
    for name in ("..", "../x", "a/b", "/etc", ".x", "a" * 200, ""):
        with pytest.raises(InvalidRequestError):
            check_model_name(name)
    outside = tmp_path / "outside"
    identity_model(outside / "1" / "model.lite")
    root = tmp_path / "repo"
    root.mkdir()
    (root / "link").symlink_to(outside)  # a symlinked model directory pointing out is not served
    repository = ModelRepository(root)
    with pytest.raises(LookupError):
        repository.source("link")


def test_settings_read_environment_then_flags():
    import argparse

    from serving.settings import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    env = {"LITE_PORT": "9001", "LITE_MAX_MESSAGE_BYTES": "1024", "LITE_REPOSITORY_CONTROL": "false"}
    settings = Settings.from_sources(parser.parse_args(["--port", "9002"]), env)
    assert (settings.port, settings.max_message_bytes, settings.repository_control) == (9002, 1024, False)
    with pytest.raises(ConfigError, match="max_message_bytes"):
        Settings.from_sources(None, {"LITE_MAX_MESSAGE_BYTES": "0"})


def test_config_pad_batches_is_a_boolean_and_pads_to_declared_sizes_or_powers_of_two():
    config = parse_config({"max_batch_size": 24, "dynamic_batching": {"pad_batches": True}}, "m")
    assert config.dynamic_batching.pad_batches
    assert config.padded_batch_sizes() == (1, 2, 4, 8, 16, 24)
    preferred = parse_config({"max_batch_size": 24, "dynamic_batching": {"preferred_batch_sizes": [8]}}, "m")
    assert preferred.padded_batch_sizes() == (1, 8, 24)
    with pytest.raises(ConfigError, match="pad_batches must be true or false"):
        parse_config({"max_batch_size": 8, "dynamic_batching": {"pad_batches": "yes"}}, "m")


def test_config_file_is_json(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.json").write_text(json.dumps({"max_batch_size": "eight"}))
    identity_model(tmp_path / "m" / "1" / "model.lite")
    with pytest.raises(ConfigError, match="max_batch_size must be an integer"):
        ModelRepository(tmp_path).source("m")


def test_config_engine_and_precision():
    config = parse_config({"max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": [2, 4]},
                           "engine": "auto", "precision": "bf16"}, "cfg")
    assert (config.engine, config.precision) == ("auto", "bf16")
    assert config.batch_sizes() == (1, 2, 4, 8)
    assert parse_config({}, "cfg").batch_sizes() == (1,)
    assert parse_config({"max_batch_size": 16}, "cfg").batch_sizes() == (1, 16)
    with pytest.raises(ConfigError, match="engine 'tensorrt'; expected one of auto, numpy"):
        parse_config({"engine": "tensorrt"}, "cfg")
    with pytest.raises(ConfigError, match="precision needs an engine"):
        parse_config({"precision": "fp16"}, "cfg")
    with pytest.raises(ConfigError, match="precision 'int4'"):
        parse_config({"engine": "auto", "precision": "int4"}, "cfg")


def test_config_engine_options():
    config = parse_config({"engine": "torch", "engine_options": {"aot": True, "mode": "max-autotune"}}, "cfg")
    assert config.engine_options == {"aot": True, "mode": "max-autotune"}
    assert parse_config({}, "cfg").engine_options == {}
    with pytest.raises(ConfigError, match="engine_options must be an object"):
        parse_config({"engine": "torch", "engine_options": ["aot"]}, "cfg")
    for engine in ({}, {"engine": "auto"}):
        with pytest.raises(ConfigError, match="engine_options apply to one engine; name it"):
            parse_config({**engine, "engine_options": {"aot": True}}, "cfg")
    with pytest.raises(ConfigError, match=r"engine_options \['device', 'threads'\] are keys of the config itself"):
        parse_config({"engine": "onnxruntime", "engine_options": {"threads": 1, "device": "cpu"}}, "cfg")


def test_text_logs_keep_the_fields_json_logs_carry():
    import logging

    from serving.logs import JsonFormatter, TextFormatter

    record = logging.makeLogRecord({"name": "serving.model", "levelname": "INFO", "levelno": 20,
                                    "msg": "model loaded", "model": "resnet", "engine": "cpu", "port": 8001,
                                    "models": ["a:1", "b:1"], "reason": "two words"})
    text = TextFormatter().format(record)
    assert "serving.model: model loaded model=resnet engine=cpu port=8001 " in text
    assert 'reason="two words"' in text and 'models="[\\"a:1\\", \\"b:1\\"]"' in text
    assert json.loads(JsonFormatter().format(record))["engine"] == "cpu"


@pytest.mark.parametrize("level, shown", [("INFO", False), ("DEBUG", True)])
def test_an_answer_to_a_client_that_has_gone_is_not_logged_as_an_error(level, shown):
    """gRPC logs an answer it could not send on a stream the client had cancelled as an ERROR with
    a traceback (grpc-go clients that cancel a stream hit it most runs); it is one DEBUG line."""
    import logging
    import sys

    from serving.logs import ClientGone

    try:
        raise RuntimeError('Failed "execute_batch"')
    except RuntimeError:
        failure = sys.exc_info()
    record = logging.makeLogRecord({
        "name": "grpc._cython.cygrpc", "levelname": "ERROR", "levelno": logging.ERROR, "exc_info": failure,
        "msg": "ExecuteBatchError raised in core by servicer method [%s]",
        "args": ("/inference.GRPCInferenceService/ModelStreamInfer",)})
    other = logging.makeLogRecord({"name": "grpc._cython.cygrpc", "levelno": logging.ERROR, "msg": "other"})
    root = logging.getLogger()
    saved = root.level
    root.setLevel(level)
    try:
        assert ClientGone().filter(record) is shown
        assert ClientGone().filter(other) is True and other.levelno == logging.ERROR
    finally:
        root.setLevel(saved)
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert record.getMessage() == ("an answer could not be sent: the client has gone "
                                   "(/inference.GRPCInferenceService/ModelStreamInfer)")
