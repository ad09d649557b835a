"""Engine options a model's config.json may set: the engines' tuning options; those that name
files, folders, libraries or memory only where the server's operator allows them. And a
config.json that is not a regular file is an error, never a model served with defaults."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from serving.config import parse_config
from serving.engine_options import EngineOptionPolicy
from serving.errors import ConfigError
from serving.repository import ModelRepository
from serving.settings import Settings

from .conftest import identity_model, start_server, write_config


def ort(options: dict) -> dict:
    return {"engine": "onnxruntime", "engine_options": options}


def torch(options: dict) -> dict:
    return {"engine": "torch", "engine_options": options}


@pytest.mark.parametrize(("config", "refused"), [
    (ort({"custom_op_libraries": ["/tmp/evil.so"]}), "custom_op_libraries: '/tmp/evil.so' is not a library the"),
    (ort({"custom_op_libraries": "/tmp/evil.so"}), "not a library the server's operator allowed"),
    (ort({"cache_dir": "/etc"}), "engine_options 'cache_dir' names a folder the server would write"),
    ({"engine": "openvino", "engine_options": {"cache_dir": "/tmp/x"}}, "'cache_dir' names a folder"),
    (ort({"compute_stream": 1234}), "engine_options 'compute_stream' names a CUDA stream's memory address"),
    (ort({"cuda_options": {"gpu_external_alloc": "140000000"}}), r"\['gpu_external_alloc'\] are not CUDA provider"),
    (ort({"weights_identity": "x"}), "'weights_identity' is not an option config.json may set for engine"),
    (torch({"precompiled": "/tmp/package"}), "precompiled: '/tmp/package' names a folder of compiled code"),
    (torch({"cache_dir": "/tmp/x"}), "'cache_dir' names a folder"),
    (torch({"inductor_options": {"cpp.cxx": ["/tmp/evil"]}}), "'cpp.cxx' = \"\\['/tmp/evil'\\]\""),
    (torch({"inductor_options": {"cuda.compile_opt_level": "-O1 -fplugin=/tmp/e.so"}}), "compile_opt_level"),
    (torch({"inductor_options": {"max_autotune_gemm_backends": "TRITON -x /tmp"}}), "max_autotune_gemm_backends"),
])
def test_options_that_name_files_or_memory_are_refused(config, refused):
    with pytest.raises(ConfigError, match=refused):
        parse_config(config, "cfg")


def test_tuning_options_pass():
    for config in (ort({"optimization": "basic", "spinning": "never", "cuda_options": {"use_tf32": "0"}}),
                   torch({"mode": "max-autotune", "aot": True, "precompiled": "auto",
                          "inductor_options": {"max_autotune_gemm_backends": "TRITON,ATEN", "coordinate_descent_tuning": True,
                                               "cpp.threads": 2}})):
        assert parse_config(config, "cfg").engine_options == config["engine_options"]


def test_the_operator_allows_a_library_and_trust_allows_every_option(tmp_path):
    library = tmp_path / "ops.so"
    library.write_bytes(b"")
    link = tmp_path / "link.so"
    link.symlink_to(library)
    allowed = EngineOptionPolicy(custom_op_libraries=(str(library.resolve()),))
    for named in (str(library), [str(link)]):
        assert parse_config(ort({"custom_op_libraries": named}), "cfg", allowed).engine_options
    with pytest.raises(ConfigError, match="not a library the server's operator allowed"):
        parse_config(ort({"custom_op_libraries": [str(library), "/tmp/other.so"]}), "cfg", allowed)
    trusted = EngineOptionPolicy(trusted=True)
    assert parse_config(ort({"cache_dir": "/tmp/x", "custom_op_libraries": ["/tmp/evil.so"]}), "cfg", trusted)


def test_settings_resolve_the_operators_libraries(tmp_path):
    library = tmp_path / "ops.so"
    library.write_bytes(b"")
    settings = Settings(custom_op_libraries=(str(tmp_path / "." / "ops.so"),))
    assert settings.engine_option_policy == EngineOptionPolicy((str(library.resolve()),), False)
    with pytest.raises(ConfigError, match="custom_op_libraries .*missing.so.*: no such file"):
        Settings(custom_op_libraries=(str(tmp_path / "missing.so"),))


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_config_json_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    identity_model(tmp_path / "m" / "1" / "model.lite")
    if kind == "fifo":
        os.mkfifo(tmp_path / "m" / "config.json")
    else:
        (tmp_path / "m" / "config.json").mkdir()
    with pytest.raises(ConfigError, match="config.json: not a regular file"):
        ModelRepository(tmp_path).source("m")


def test_a_server_refuses_a_library_a_config_names_and_serves_on(tmp_path):
    """The library is never opened: it is not a shared library at all, and ONNX Runtime's error
    on it would differ. The model is UNAVAILABLE naming the option; cache_dir writes nothing;
    a config.json FIFO is refused; the good model serves."""
    evil = tmp_path / "evil.so"
    evil.write_bytes(b"not a library")
    elsewhere = tmp_path / "elsewhere"
    repository = tmp_path / "models"
    for name in ("good", "library", "cache", "fifo"):
        identity_model(repository / name / "1" / "model.lite")
    write_config(repository / "good", ort({"optimization": "basic"}))
    write_config(repository / "library", ort({"custom_op_libraries": [str(evil)]}))
    write_config(repository / "cache", ort({"cache_dir": str(elsewhere)}))
    os.mkfifo(repository / "fifo" / "config.json")
    server = start_server(repository, "--device", "cpu")
    try:
        client = grpcclient.InferenceServerClient(server.address)
        assert client.is_model_ready("good")
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert {name: index[name]["state"] for name in index} == {
            "good": "READY", "library": "UNAVAILABLE", "cache": "UNAVAILABLE", "fifo": "UNAVAILABLE"}
        assert "custom_op_libraries" in index["library"]["reason"]
        assert "not a library the server's operator allowed" in index["library"]["reason"]
        assert "'cache_dir' names a folder" in index["cache"]["reason"]
        assert "not a regular file" in index["fifo"]["reason"]
        assert not elsewhere.exists()
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        assert client.infer("good", [tensor]).as_numpy("OUTPUT0").sum() == 16
        client.close()
    finally:
        server.stop()


def test_a_library_the_operator_allows_serves_its_ops(onnxruntime_extensions, tmp_path):
    """onnxruntime-extensions' StringLower runs on ONNX Runtime in the server once the operator
    passes --custom-op-library and the model's config names that library."""
    import converter
    from tests.lite.engines.test_ort_custom_op_libraries import lower_case_model

    library = onnxruntime_extensions.get_library_path()
    repository = tmp_path / "models"
    (repository / "lower" / "1").mkdir(parents=True)
    converter.convert(lower_case_model(), repository / "lower" / "1" / "model.lite", allow_custom=True, verify=False)
    write_config(repository / "lower", ort({"custom_op_libraries": [library]}))
    server = start_server(repository, "--device", "cpu", "--custom-op-library", str(Path(library)))
    try:
        client = grpcclient.InferenceServerClient(server.address)
        assert client.is_model_ready("lower")
        tensor = grpcclient.InferInput("text", [2], "BYTES")
        tensor.set_data_from_numpy(np.array([b"Hello World", b"ABC"], dtype=object))
        assert list(client.infer("lower", [tensor]).as_numpy("lower")) == [b"hello world", b"abc"]
        client.close()
    finally:
        server.stop()
