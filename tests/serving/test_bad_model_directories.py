"""One bad model directory never keeps the server from serving the others.

Each directory below once made ``lite serve`` exit at startup (RecursionError, ValueError,
MemoryError, format errors on the default device) or failed to load with an untyped error (damaged
fused activations or opset imports). Now each is reported UNAVAILABLE with its
reason in the repository index, the server starts, and the good model serves.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lite.format import GraphBuilder, to_bytes

from .conftest import identity_model, start_server, write_config

pytestmark = pytest.mark.timeout(120)

BAD = {
    "deep": "nested too deeply",
    "huge_integer": "not readable JSON",
    "warmup_too_big": "exceeds the model's max_batch_size",
    "warmup_absurd": "batch_size must be an integer >= 1 and <= 4096",
    "oversized_config": "larger than",
    "corrupt": "cannot load",
    "linked_config": "outside the model's folder",
    "unknown_activation": "unknown fused activation 'Gelu9'",
    "activation_not_utf8": "fused_activation is not UTF-8",
    "activation_params": "fused activation Clip takes 2 parameters, got 1",
    "opset_2_40": "opset version 1099511627776",
    "version_zero": "'0' (versions are 1 to 18 digits, from 1)",
    "linked_model": "'1' (its model.lite resolves outside the repository)",
    "no_model_file": "'1' (no model.lite file in it)",
    "weight_changed": "do not match the checksum written with the file",
}
# Model files whose structure is sound but whose semantics the engines cannot take.
DAMAGED = {
    "unknown_activation": {"fused_activation": "Gelu9"},
    "activation_not_utf8": {"fused_activation": b"\xff\xfe"},
    "activation_params": {"fused_activation": "Clip", "fused_activation_params": [1.0]},
    "opset_2_40": {"opset": 1 << 40},
}


def damaged_identity_model(path, opset: int = 21, **attributes) -> None:
    b = GraphBuilder("identity", opset=opset)
    x = b.input("INPUT0", np.float32, ["N", 16])
    b.output(b.node("Identity", [x], outputs=["OUTPUT0"], **attributes), np.float32, ["N", 16])
    path.write_bytes(to_bytes(b.build()))


@pytest.fixture(scope="module")
def bad_repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_repository")
    identity_model(root / "good" / "1" / "model.lite")
    for name in BAD:
        identity_model(root / name / "1" / "model.lite")
    (root / "deep" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "huge_integer" / "config.json").write_text('{"max_batch_size": ' + "9" * 5000 + "}")
    write_config(root / "warmup_too_big", {"max_batch_size": 8, "warmup": {"batch_size": 2**40}})
    write_config(root / "warmup_absurd", {"warmup": {"batch_size": 2**40}})
    (root / "oversized_config" / "config.json").write_text('{"max_batch_size": 1' + " " * (2 << 20) + "}")
    model = root / "corrupt" / "1" / "model.lite"
    data = bytearray(model.read_bytes())
    for i in range(40, len(data), 7):
        data[i] ^= 0x5A
    model.write_bytes(bytes(data))
    for name, damage in DAMAGED.items():
        damaged_identity_model(root / name / "1" / "model.lite", **damage)
    (root / "version_zero" / "1" / "model.lite").rename(root / "version_zero" / "1" / "moved.lite")
    (root / "version_zero" / "0").mkdir()
    (root / "version_zero" / "1" / "moved.lite").rename(root / "version_zero" / "0" / "model.lite")
    (root / "no_model_file" / "1" / "model.lite").rename(root / "no_model_file" / "1" / "model.onnx")
    outside = root.parent / "outside.lite"
    (root / "linked_model" / "1" / "model.lite").rename(outside)
    os.symlink(outside, root / "linked_model" / "1" / "model.lite")
    identity_model(root / "my model" / "1" / "model.lite")
    weighted = GraphBuilder("scale")
    x = weighted.input("INPUT0", np.float32, ["N", 16])
    y = weighted.node("MatMul", [x, weighted.constant("W", np.eye(16, dtype=np.float32))], outputs=["OUTPUT0"])
    weighted.output(y, np.float32, ["N", 16])
    data = bytearray(to_bytes(weighted.build()))
    data[data.index(np.eye(16, dtype=np.float32).tobytes()) + 2] ^= 0x10  # a sound file, one weight changed
    (root / "weight_changed" / "1" / "model.lite").write_bytes(bytes(data))
    secret = root.parent / "secret.json"
    secret.write_text(json.dumps({"db_password": "hunter2"}))
    os.symlink(secret, root / "linked_config" / "config.json")
    return root


def test_the_good_model_serves_and_each_bad_one_is_reported_with_its_reason(bad_repository):
    import tritonclient.grpc as grpcclient

    server = start_server(bad_repository)
    try:
        with grpcclient.InferenceServerClient(server.address) as client:
            assert client.is_server_ready()
            request = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
            request.set_data_from_numpy(np.ones((1, 16), np.float32))
            assert client.infer("good", [request]).as_numpy("OUTPUT0").sum() == 16
            index = {m.name: m for m in client.get_model_repository_index().models}
    finally:
        assert server.stop() == 0
    assert index["good"].state == "READY"
    for name, reason in BAD.items():
        assert index[name].state == "UNAVAILABLE", name
        assert reason in index[name].reason, (name, index[name].reason)
    assert "db_password" not in "".join(server.logs) + index["linked_config"].reason
    assert "my model" not in index
    assert sum("'my model' is not a model name" in line for line in server.logs) == 1
