"""System shared memory, end to end: a real ``lite serve`` on loopback, tritonclient's own
shared-memory utilities (``tritonclient.utils.shared_memory``) creating and filling the regions,
and every refusal the server promises (docs/serving.md, "Shared memory"; docs/reliability.md,
section 8)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from .conftest import identity_model, multi_model, slow_model, start_server
from .shm_tools import Regions, new_key, refused, shm_input, shm_output, status_of

grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException, serialize_byte_tensor  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory in /dev/shm")

ROWS = np.arange(64, dtype=np.float32).reshape(4, 16)


@pytest.fixture(scope="module")
def shm_repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shm_repository")
    identity_model(root / "identity" / "1" / "model.lite")
    slow_model(root / "slow" / "1" / "model.lite")
    return root


@pytest.fixture(scope="module")
def shm_server(shm_repository):
    server = start_server(shm_repository)
    yield server
    assert server.stop() == 0


@pytest.fixture()
def client(shm_server):
    client = grpcclient.InferenceServerClient(shm_server.address)
    yield client
    client.close()


@pytest.fixture()
def regions(client):
    made = Regions(client)
    yield made
    made.close()


def _server_fds_on(server, key: str) -> int:
    target = "/dev/shm/" + key.lstrip("/")
    fds = Path(f"/proc/{server.process.pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd) == target
        except OSError:
            pass
    return count


# ----- what works ---------------------------------------------------------------------------------


def test_inputs_and_outputs_in_shared_memory_carry_no_tensor_bytes(client, regions):
    metadata = client.get_server_metadata(as_json=True)
    assert "system_shared_memory" in metadata["extensions"]
    regions.create("in", ROWS.nbytes, values=ROWS)
    out = regions.create("out", ROWS.nbytes)
    result = client.infer("identity", [shm_input("INPUT0", ROWS.shape, region="in", byte_size=ROWS.nbytes)],
                          outputs=[shm_output("OUTPUT0", "out", ROWS.nbytes)])
    response = result.get_response()
    assert list(response.outputs[0].shape) == [4, 16] and response.outputs[0].datatype == "FP32"
    assert response.raw_output_contents == [b""]  # one entry per output, empty: the data is in the region
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4, 16]), ROWS)


def test_regions_at_offsets_and_raw_inputs_mix_in_one_request(client, regions):
    """Two tensors in one region at offsets; the output in memory, answered raw as usual."""
    region = regions.create("both", 2 * ROWS.nbytes + 64)
    shm.set_shared_memory_region(region, [ROWS + 100], offset=64)
    result = client.infer("identity", [shm_input("INPUT0", ROWS.shape, region="both", byte_size=ROWS.nbytes, offset=64)],
                          outputs=[shm_output("OUTPUT0", "both", ROWS.nbytes, offset=64 + ROWS.nbytes)])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(region, np.float32, [4, 16], offset=64 + ROWS.nbytes),
                                  ROWS + 100)
    # Input in memory, output answered in the message.
    result = client.infer("identity", [shm_input("INPUT0", ROWS.shape, region="both", byte_size=ROWS.nbytes, offset=64)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ROWS + 100)
    # Input in the message, output in memory.
    tensor = shm_input("INPUT0", ROWS.shape)
    tensor.set_data_from_numpy(ROWS * 2)
    client.infer("identity", [tensor], outputs=[shm_output("OUTPUT0", "both", ROWS.nbytes)])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(region, np.float32, [4, 16]), ROWS * 2)


def test_a_model_of_many_datatypes_takes_some_inputs_from_memory_and_the_rest_raw(tmp_path):
    """raw_input_contents holds entries only for the inputs not in shared memory, in order."""
    root = tmp_path / "repo"
    multi_model(root / "multi" / "1" / "model.lite")
    server = start_server(root)
    client = grpcclient.InferenceServerClient(server.address)
    made = Regions(client)
    try:
        values = {
            "F16": np.full((2, 3), 1.5, np.float16), "I32": np.arange(6, dtype=np.int32).reshape(2, 3),
            "B": np.array([[True, False, True]] * 2), "S": np.array([[b"ab", b""], [b"xyz", b"q"]], dtype=object),
            "U8": np.full((2, 3), 7, np.uint8), "F64": np.full((2, 3), -2.25),
        }
        strings = serialize_byte_tensor(values["S"])  # one object: the length-prefixed bytes
        made.create("i32", values["I32"].nbytes, values=values["I32"])
        made.create("s", len(strings.item()), values=strings)
        made.create("s_out", 64)
        datatypes = {"F16": "FP16", "I32": "INT32", "B": "BOOL", "S": "BYTES", "U8": "UINT8", "F64": "FP64"}
        inputs = []
        for name, array in values.items():
            if name == "I32":
                inputs.append(shm_input(name, array.shape, "INT32", "i32", array.nbytes))
            elif name == "S":
                inputs.append(shm_input(name, array.shape, "BYTES", "s", len(strings.item())))
            else:
                tensor = shm_input(name, array.shape, datatypes[name])
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
        outputs = [shm_output(f"{name}_OUT") for name in values if name != "S"] + [shm_output("S_OUT", "s_out", 64)]
        result = client.infer("multi", inputs, outputs=outputs)
        for name, array in values.items():
            if name != "S":
                np.testing.assert_array_equal(result.as_numpy(f"{name}_OUT"), array)
        answered = shm.get_contents_as_numpy(made.handles[2], np.object_, [2, 2])
        assert answered.tolist() == [[b"ab", b""], [b"xyz", b"q"]]
    finally:
        made.close()
        client.close()
        assert server.stop() == 0


def test_status_lists_regions_and_unregistering_closes_them(shm_server, client, regions):
    handle = regions.create("listed", 4096)
    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert status["listed"]["key"] == handle.key and int(status["listed"]["byte_size"]) == 4096
    one = client.get_system_shared_memory_status("listed", as_json=True)["regions"]
    assert list(one) == ["listed"]
    assert _server_fds_on(shm_server, handle.key) == 1
    client.unregister_system_shared_memory("listed")
    assert "listed" not in client.get_system_shared_memory_status(as_json=True).get("regions", {})
    assert _server_fds_on(shm_server, handle.key) == 0


def test_shared_memory_on_a_stream(client, regions):
    regions.create("s_in", ROWS.nbytes, values=ROWS)
    out = regions.create("s_out", ROWS.nbytes)
    answers: list = []
    done = threading.Event()

    def callback(result, error):
        answers.append((result, error))
        done.set()

    client.start_stream(callback)
    try:
        client.async_stream_infer("identity", [shm_input("INPUT0", ROWS.shape, region="s_in", byte_size=ROWS.nbytes)],
                                  outputs=[shm_output("OUTPUT0", "s_out", ROWS.nbytes)], request_id="7")
        assert done.wait(10)
    finally:
        client.stop_stream()
    assert answers[0][1] is None
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out, np.float32, [4, 16]), ROWS)


def test_a_region_unregistered_while_a_request_uses_it_is_still_answered_then_closed(shm_server, client, regions):
    """The request keeps the object it resolved: the answer is written into it, and the server's
    descriptor closes once that request is done (never a descriptor reused by another file)."""
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    x_in = regions.create("busy_in", x.nbytes, values=x)
    x_out = regions.create("busy_out", x.nbytes)
    answers: list = []
    done = threading.Event()

    def callback(result, error):
        answers.append((result, error))
        done.set()

    client.async_infer("slow", [shm_input("X", x.shape, region="busy_in", byte_size=x.nbytes)], callback,
                       outputs=[shm_output("Y", "busy_out", x.nbytes)])
    time.sleep(0.02)
    client.unregister_system_shared_memory()
    assert done.wait(30)
    result, error = answers[0]
    if error is None:  # it resolved the regions before they were unregistered
        np.testing.assert_allclose(shm.get_contents_as_numpy(x_out, np.float32, [512, 512]), x, rtol=1e-6)
    else:  # it arrived after: the regions were gone
        assert status_of(error) == "NOT_FOUND", error
    deadline = time.monotonic() + 5
    while _server_fds_on(shm_server, x_in.key) + _server_fds_on(shm_server, x_out.key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _server_fds_on(shm_server, x_in.key) + _server_fds_on(shm_server, x_out.key) == 0
    # The server serves on.
    assert client.is_server_ready()


def test_cuda_shared_memory_is_refused_clearly_and_its_cleanup_calls_succeed(client):
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    client.unregister_cuda_shared_memory()  # "unregister all": nothing to do
    refused(lambda: client.register_cuda_shared_memory("gpu", b"\x00" * 64, 0, 64), "UNIMPLEMENTED",
             "does not offer CUDA shared memory")
    refused(lambda: client.unregister_cuda_shared_memory("gpu"), "NOT_FOUND", "'gpu'")


# ----- registration refusals ----------------------------------------------------------------------


@pytest.mark.parametrize("key", [
    "/../etc/passwd", "../etc/passwd", "/etc/passwd", "a/b", "//x", "..", ".", "/..", "/.hidden", "", "/",
    "x" * 256, "/" + "x" * 256, "na\x00me", "sp ace", "/dev/shm/x", "x\n",
])
def test_keys_that_are_not_plain_shared_memory_names_are_refused(client, key):
    refused(lambda: client.register_system_shared_memory("bad", key, 16), "INVALID_ARGUMENT",
             "not a POSIX shared-memory name")
    assert client.get_system_shared_memory_status(as_json=True) == {}


def test_a_symlink_in_dev_shm_is_not_followed(client, regions):
    secret = Path("/dev/shm") / f"lite_test_secret_{uuid.uuid4().hex[:8]}"
    secret.write_bytes(b"s3cret!!" * 8)
    links = [Path("/dev/shm") / f"lite_test_link_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    links[0].symlink_to("/etc/passwd")
    links[1].symlink_to(secret)
    try:
        for link in links:
            refused(lambda: client.register_system_shared_memory("link", "/" + link.name, 16),
                     "INVALID_ARGUMENT", "symbolic link")
    finally:
        for path in (*links, secret):
            path.unlink()


def test_directories_and_fifos_in_dev_shm_are_refused_without_blocking(client):
    directory = Path("/dev/shm") / f"lite_test_dir_{uuid.uuid4().hex[:8]}"
    fifo = Path("/dev/shm") / f"lite_test_fifo_{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    os.mkfifo(fifo)
    try:
        for path in (directory, fifo):
            refused(lambda: client.register_system_shared_memory("odd", "/" + path.name, 16, client_timeout=5),
                     "INVALID_ARGUMENT", "not a regular file")
    finally:
        directory.rmdir()
        fifo.unlink()


def test_a_missing_object_is_not_found(client):
    refused(lambda: client.register_system_shared_memory("ghost", new_key(), 16), "NOT_FOUND",
             "no shared-memory object")


def test_sizes_and_offsets_outside_the_object_are_refused(client, regions):
    handle = regions.create("sized", 4096, register=False)
    for offset, byte_size in [(0, 4097), (4000, 200), (4096, 1), (2**64 - 1, 1), (1, 2**64 - 1), (0, 0)]:
        refused(lambda: client.register_system_shared_memory("sized", handle.key, byte_size, offset),
                 "INVALID_ARGUMENT", "sized")
    client.register_system_shared_memory("sized", handle.key, 96, 4000)  # the last 96 bytes: fits
    refused(lambda: client.register_system_shared_memory("sized", handle.key, 16), "ALREADY_EXISTS",
             "'sized' is already registered")


def test_unknown_region_names_are_not_found(client):
    refused(lambda: client.get_system_shared_memory_status("nope"), "NOT_FOUND", "'nope'")
    refused(lambda: client.unregister_system_shared_memory("nope"), "NOT_FOUND", "'nope'")


# ----- request refusals ---------------------------------------------------------------------------


def test_requests_naming_regions_badly_are_refused_and_the_server_serves_on(client, regions):
    regions.create("r", ROWS.nbytes, values=ROWS)
    regions.create("small", 16)
    cases = [
        (shm_input("INPUT0", ROWS.shape, region="ghost", byte_size=ROWS.nbytes), None, "NOT_FOUND", "'ghost'"),
        (shm_input("INPUT0", ROWS.shape, region="r", byte_size=ROWS.nbytes - 4), None, "INVALID_ARGUMENT",
         "needs 256 bytes"),
        (shm_input("INPUT0", [2, 16], region="r", byte_size=128, offset=200), None, "INVALID_ARGUMENT", "do not fit"),
        (shm_input("INPUT0", [2, 16], region="r", byte_size=128, offset=-4), None, "INVALID_ARGUMENT", ">= 0"),
        (shm_input("INPUT0", [2, 16], region="r", byte_size=2**62, offset=2**62), None, "INVALID_ARGUMENT",
         "do not fit"),
        (shm_input("INPUT0", ROWS.shape, region="r", byte_size=ROWS.nbytes), shm_output("OUTPUT0", "small", 16),
         "INVALID_ARGUMENT", "more than the shared_memory_byte_size 16"),
        (shm_input("INPUT0", ROWS.shape, region="r", byte_size=ROWS.nbytes), shm_output("OUTPUT0", "ghost", 16),
         "NOT_FOUND", "'ghost'"),
    ]
    for tensor, output, code, words in cases:
        refused(lambda: client.infer("identity", [tensor], outputs=[output] if output else None), code, words)
    tensor = shm_input("INPUT0", ROWS.shape)
    tensor.set_data_from_numpy(ROWS)
    np.testing.assert_array_equal(client.infer("identity", [tensor]).as_numpy("OUTPUT0"), ROWS)


def test_an_object_shrunk_after_registration_is_an_error_not_a_crash(shm_server, client, regions):
    handle = regions.create("shrinking", ROWS.nbytes, values=ROWS)
    path = Path("/dev/shm") / handle.key.lstrip("/")
    os.truncate(path, 16)
    refused(lambda: client.infer("identity", [shm_input("INPUT0", ROWS.shape, region="shrinking",
                                                      byte_size=ROWS.nbytes)]), "INVALID_ARGUMENT", "shrank")
    tensor = shm_input("INPUT0", ROWS.shape)
    tensor.set_data_from_numpy(ROWS)
    refused(lambda: client.infer("identity", [tensor], outputs=[shm_output("OUTPUT0", "shrinking", ROWS.nbytes)]),
             "INVALID_ARGUMENT", "shrank")
    assert shm_server.process.poll() is None and client.is_server_ready()


def test_an_object_resized_while_requests_read_it_never_takes_the_server_down(shm_server, client, regions):
    """A thread shrinks and regrows the object as fast as it can while requests read and write it:
    each answer is right or INVALID_ARGUMENT, and the process lives (a mapping would SIGBUS)."""
    x = np.ones((64, 16), np.float32)
    handle = regions.create("racing", x.nbytes, values=x)
    path = Path("/dev/shm") / handle.key.lstrip("/")
    stop = threading.Event()

    def resize() -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            while not stop.is_set():
                os.ftruncate(fd, 0)
                os.ftruncate(fd, x.nbytes)
        finally:
            os.close(fd)

    thread = threading.Thread(target=resize)
    thread.start()
    outcomes = {"OK": 0}
    try:
        for _ in range(200):
            try:
                client.infer("identity", [shm_input("INPUT0", x.shape, region="racing", byte_size=x.nbytes)],
                             outputs=[shm_output("OUTPUT0", "racing", x.nbytes)])
                outcomes["OK"] += 1
            except InferenceServerException as err:
                assert status_of(err) == "INVALID_ARGUMENT", err
                outcomes[status_of(err)] = outcomes.get(status_of(err), 0) + 1
    finally:
        stop.set()
        thread.join()
    assert shm_server.process.poll() is None and client.is_server_ready()
    assert sum(outcomes.values()) == 200
