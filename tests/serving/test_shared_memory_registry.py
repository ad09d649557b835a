"""The shared-memory registry in process, without a transport: descriptors are closed when the
last user lets go and at shutdown, and a server of several workers refuses registration."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from serving import InvalidRequestError, RegionExistsError, RegionNotFoundError, UnsupportedError
from serving.dataplane import DataPlane
from serving.settings import Settings
from serving.shared_memory import SharedMemoryRegistry, check_key

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory in /dev/shm")


@pytest.fixture()
def shm_object():
    path = Path("/dev/shm") / f"lite_test_{uuid.uuid4().hex[:12]}"
    path.write_bytes(np.arange(256, dtype=np.uint8).tobytes())
    yield path
    path.unlink(missing_ok=True)


def _open_on(path: Path) -> int:
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += os.readlink(fd) == str(path)
        except OSError:
            pass
    return count


def registry() -> SharedMemoryRegistry:
    return SharedMemoryRegistry(max_regions=4, max_bytes=1 << 20, max_tensor_elements=1 << 20,
                                max_message_bytes=1 << 20)


def test_keys_map_to_one_name_inside_dev_shm():
    assert check_key("/input0") == "input0"
    assert check_key("perf_INPUT0_data:1.a") == "perf_INPUT0_data:1.a"
    for key in ("/a/b", "..", "/..", ".x", "/", "", "a" * 256, "a\x00"):
        with pytest.raises(InvalidRequestError):
            check_key(key)


def test_a_region_in_use_keeps_its_descriptor_until_the_request_lets_go(shm_object):
    regions = registry()
    region = regions.register("r", "/" + shm_object.name, 16, 128)
    where = region.locate(8, 32, "input 'x'")
    del region
    assert _open_on(shm_object) == 1
    regions.unregister("r")
    assert _open_on(shm_object) == 1  # the request still holds it
    assert where.read("input 'x'").tolist() == list(range(24, 56))
    where.write(np.zeros(4, np.float32), "output 'y'")
    assert shm_object.read_bytes()[24:40] == bytes(16)
    del where
    assert _open_on(shm_object) == 0


def test_shutdown_unregisters_and_closes_every_region(shm_object):
    regions = registry()
    regions.register("a", "/" + shm_object.name, 0, 64)
    regions.register("b", shm_object.name, 64, 64)
    assert _open_on(shm_object) == 2
    regions.close()
    assert regions.status() == [] and _open_on(shm_object) == 0


def test_typed_errors(shm_object):
    regions = registry()
    regions.register("a", "/" + shm_object.name, 0, 64)
    with pytest.raises(RegionExistsError):
        regions.register("a", "/" + shm_object.name, 0, 64)
    with pytest.raises(RegionNotFoundError):
        regions.get("b", "input 'x'")
    with pytest.raises(InvalidRequestError, match="do not fit"):
        regions.get("a", "input 'x'").locate(60, 8, "input 'x'")
    with pytest.raises(InvalidRequestError, match="needs 64 bytes"):
        regions.read_tensor(regions.get("a", "x").locate(0, 60, "x"), "FP32", (16,), "input 'x'")


def test_a_server_of_several_workers_refuses_shared_memory(shm_object):
    plane = DataPlane(None, Settings(workers=2))
    with pytest.raises(UnsupportedError, match="2 worker processes"):
        plane.register_shared_memory("a", "/" + shm_object.name, 0, 64)
    assert "system_shared_memory" not in plane.server_metadata()[2]
