"""System shared memory: Triton's extension by which a co-located client hands tensors over in
POSIX shared memory instead of in the gRPC message.

Protocol (Triton ``extension_shared_memory.md``, gRPC): the client creates a shared-memory object
(``shm_open``), registers a region of it under a name (``SystemSharedMemoryRegister``: name, key,
offset, byte_size), and then marks an input or a requested output with the parameters
``shared_memory_region``, ``shared_memory_byte_size`` and ``shared_memory_offset``. The server
reads the input's bytes from the region, and writes the output's bytes into it and answers no raw
bytes for that output.

What a client may name, and how the server touches it:

- the key is a plain POSIX shared-memory name (``"/input0"``: one optional leading slash, then
  letters, digits and ``._:@+=,~-``, at most 255, not starting with a dot), opened relative to an
  ``O_DIRECTORY | O_NOFOLLOW`` descriptor of ``/dev/shm`` with ``O_NOFOLLOW``: no path, no symlink,
  nothing outside ``/dev/shm`` can be named. It must be a regular file;
- a region's offset and size must lie within the object as ``fstat`` sees it at registration;
  every offset and size a request gives must lie within its region. Python's integers do not
  overflow, and every bound is checked as ``offset <= size and byte_size <= size - offset``;
- the number of regions and the bytes they span together are capped (``max_regions``,
  ``max_bytes``);
- the server never maps the object. Its owner can shrink it at any time, and a mapping read past
  the new end faults the process (SIGBUS) with no way to recover; no size check before a read
  closes that race. Inputs are read with ``pread`` into memory the server owns (one copy, which
  the engine may keep), and outputs written with ``pwrite``: a shrunk object gives a short read,
  an error naming the region, never a signal. A write into a shrunk object is refused after an
  ``fstat``; one racing the shrink can only grow the object back, within the registered bytes;
- a region's descriptor belongs to a :class:`Region` object, closed when the last reference to it
  goes: a request that resolved the region before it was unregistered still reads and writes
  that object, never a descriptor number reused by another file.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .datatypes import element_count, numpy_dtype, serialize_bytes
from .errors import (
    InvalidRequestError,
    RegionExistsError,
    RegionNotFoundError,
    ResourceExhaustedError,
    UnsupportedError,
)

SHM_DIRECTORY = "/dev/shm"
MAX_NAME_LENGTH = 256  # a region's name (a dictionary key on the server)
_KEY = re.compile(r"/?([A-Za-z0-9_:@+=,~-][A-Za-z0-9._:@+=,~-]{0,254})")
_READ_CHUNK = 1 << 30  # one pread reads at most 2 GiB - 4 KiB on Linux


class Region:
    """One registered region: ``byte_size`` bytes at ``offset`` of the object ``key``."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int, file: _SharedFile) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self._file = file

    def locate(self, offset: int, byte_size: int, what: str) -> RegionSlice:
        """The part of this region a tensor names; INVALID_ARGUMENT unless it lies inside."""
        if offset < 0 or byte_size < 0:
            raise InvalidRequestError(
                f"{what}: shared_memory_offset {offset} and shared_memory_byte_size {byte_size} must be >= 0"
            )
        if offset > self.byte_size or byte_size > self.byte_size - offset:
            raise InvalidRequestError(
                f"{what}: {byte_size} bytes at offset {offset} of shared-memory region {self.name!r} do not fit "
                f"its {self.byte_size} bytes; give an offset and byte size inside the registered region"
            )
        return RegionSlice(self, offset, byte_size)

    def read(self, offset: int, byte_size: int, what: str) -> np.ndarray:
        """``byte_size`` bytes at ``offset`` of the region, copied into a new uint8 array."""
        return self._file.read(self.offset + offset, byte_size, f"{what} (shared-memory region {self.name!r})")

    def write(self, offset: int, data: memoryview, what: str) -> None:
        self._file.write(self.offset + offset, data, f"{what} (shared-memory region {self.name!r})")


@dataclass(frozen=True)
class RegionSlice:
    """Where one tensor's bytes lie: ``byte_size`` bytes at ``offset`` of ``region``."""

    region: Region
    offset: int
    byte_size: int

    def read(self, what: str) -> np.ndarray:
        return self.region.read(self.offset, self.byte_size, what)

    def write(self, array: np.ndarray, what: str) -> None:
        """Write ``array``'s raw form (serving.datatypes) at the start of the slice."""
        data = raw_bytes(array)
        if data.nbytes > self.byte_size:
            raise InvalidRequestError(
                f"{what} has {data.nbytes} bytes ({array.dtype} {list(array.shape)}), more than the "
                f"shared_memory_byte_size {self.byte_size} given for it in region {self.region.name!r}; "
                "give a larger region"
            )
        self.region.write(self.offset, data, what)


class _SharedFile:
    """The open descriptor of one shared-memory object; closed when no region holds it."""

    def __init__(self, fd: int, key: str) -> None:
        self.fd = fd
        self.key = key

    def __del__(self) -> None:
        # Closed by the last reference, not at unregistration: a request still using the region
        # must never reach a descriptor number that another file has been given since.
        os.close(self.fd)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def read(self, position: int, byte_size: int, what: str) -> np.ndarray:
        out = np.empty(byte_size, np.uint8)
        view = memoryview(out)
        done = 0
        while done < byte_size:
            count = os.preadv(self.fd, [view[done:done + _READ_CHUNK]], position + done)
            if count == 0:
                raise InvalidRequestError(
                    f"{what}: the shared-memory object {self.key!r} now ends at byte {position + done}, before the "
                    f"{byte_size} bytes at {position}; its owner shrank it after registering: register it again"
                )
            done += count
        return out

    def write(self, position: int, data: memoryview, what: str) -> None:
        end = position + data.nbytes
        size = self.size()
        if size < end:
            raise InvalidRequestError(
                f"{what}: the shared-memory object {self.key!r} now holds {size} bytes, fewer than the {end} this "
                "output needs; its owner shrank it after registering: register it again"
            )
        done = 0
        while done < data.nbytes:
            done += os.pwrite(self.fd, data[done:done + _READ_CHUNK], position + done)


def raw_bytes(array: np.ndarray) -> memoryview:
    """The raw form of ``array`` (serving.datatypes: little-endian, row-major; BYTES length-prefixed)
    as a byte view, without a copy when the array is already contiguous and little-endian."""
    if array.dtype.kind in ("O", "U", "S"):
        return memoryview(serialize_bytes(array))
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def check_key(key: str) -> str:
    """The file name of a shared-memory key under /dev/shm; INVALID_ARGUMENT for anything but a
    plain POSIX shared-memory name."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise InvalidRequestError(
            f"shared-memory key {key[:300]!r} is not a POSIX shared-memory name: give '/name' or 'name', where the "
            "name is 1 to 255 letters, digits or ._:@+=,~- and does not start with a dot (no other '/', no path)"
        )
    return match.group(1)


class SharedMemoryRegistry:
    """The regions registered with one server process (the data plane owns it)."""

    def __init__(self, max_regions: int, max_bytes: int, max_tensor_elements: int, max_message_bytes: int,
                 enabled: bool = True, refusal: str = "", directory: str = SHM_DIRECTORY) -> None:
        self.max_regions = max_regions
        self.max_bytes = max_bytes
        # What one input may make the server read, as if it came in a message (serving.limits).
        self.max_tensor_elements = max_tensor_elements
        self.max_message_bytes = max_message_bytes
        self.enabled = enabled
        self._refusal = refusal or "system shared memory is turned off on this server (--no-shared-memory)"
        self._directory = directory
        self._regions: dict[str, Region] = {}

    @property
    def registered_bytes(self) -> int:
        return sum(region.byte_size for region in self._regions.values())

    def register(self, name: str, key: str, offset: int, byte_size: int) -> Region:
        self._check_enabled()
        if not name or len(name) > MAX_NAME_LENGTH:
            raise InvalidRequestError(f"a shared-memory region needs a name of 1 to {MAX_NAME_LENGTH} characters, "
                                      f"got {len(name)}")
        if name in self._regions:
            raise RegionExistsError(
                f"shared-memory region {name!r} is already registered (key {self._regions[name].key!r}); "
                "unregister it first or choose another name"
            )
        file_name = check_key(key)
        if byte_size <= 0:
            raise InvalidRequestError(f"shared-memory region {name!r}: byte_size must be positive, got {byte_size}")
        if len(self._regions) >= self.max_regions:
            raise ResourceExhaustedError(
                f"shared-memory region {name!r}: {len(self._regions)} regions are registered, the server's limit "
                f"(--max-shared-memory-regions); unregister some first"
            )
        shared = self._open(file_name, key)
        size = shared.size()
        if offset > size or byte_size > size - offset:
            raise InvalidRequestError(
                f"shared-memory region {name!r}: {byte_size} bytes at offset {offset} do not fit the object {key!r}, "
                f"which holds {size} bytes"
            )
        if byte_size > self.max_bytes - self.registered_bytes:
            raise ResourceExhaustedError(
                f"shared-memory region {name!r}: {byte_size} bytes would bring the registered regions past "
                f"{self.max_bytes} bytes (--max-shared-memory-bytes; {self.registered_bytes} registered); "
                "unregister some first or register smaller regions"
            )
        region = Region(name, key, offset, byte_size, shared)
        self._regions[name] = region
        return region

    def _open(self, file_name: str, key: str) -> _SharedFile:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        directory = os.open(self._directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # Refuse what is plainly no shared-memory object before opening it (opening a FIFO or a
            # device can have effects); the fstat below decides, on the descriptor itself.
            mode = os.stat(file_name, dir_fd=directory, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise InvalidRequestError(f"shared-memory object {key!r} is a symbolic link; register the object itself")
            if not stat.S_ISREG(mode):
                raise InvalidRequestError(f"shared-memory object {key!r} is not a regular file")
            fd = os.open(file_name, flags, dir_fd=directory)
        except FileNotFoundError as err:
            raise RegionNotFoundError(
                f"no shared-memory object {key!r} exists on the server's machine; create it (shm_open) before "
                "registering it"
            ) from err
        except OSError as err:  # EACCES; ELOOP: replaced by a symlink since the stat; ...
            raise InvalidRequestError(
                f"shared-memory object {key!r} cannot be opened for reading and writing: {err.strerror or err}"
            ) from err
        finally:
            os.close(directory)
        shared = _SharedFile(fd, key)  # closes fd when dropped, on every path below
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidRequestError(f"shared-memory object {key!r} is not a regular file")
        return shared

    def unregister(self, name: str = "") -> None:
        """Forget region ``name`` (empty: every region). A request that is using it finishes with it."""
        self._check_enabled()
        if not name:
            self._regions.clear()
            return
        if self._regions.pop(name, None) is None:
            raise RegionNotFoundError(f"no shared-memory region named {name!r} is registered")

    def status(self, name: str = "") -> list[Region]:
        self._check_enabled()
        if not name:
            return list(self._regions.values())
        return [self.get(name, "SystemSharedMemoryStatus")]

    def get(self, name: str, what: str) -> Region:
        self._check_enabled()
        region = self._regions.get(name)
        if region is None:
            raise RegionNotFoundError(
                f"{what}: no shared-memory region named {name[:300]!r} is registered; register it first "
                "(SystemSharedMemoryRegister)"
            )
        return region

    def check_request_bytes(self, slices: Iterable[RegionSlice], in_message: int) -> None:
        """A request's inputs in memory and in its message may hold ``max_message_bytes`` together,
        checked before a byte is read: the message limit bounds what a request costs the server,
        and otherwise a request of a few hundred bytes could name gigabytes (every input up to
        ``max_tensor_elements`` elements of 8 bytes, each read from the same region)."""
        in_memory = sum(where.byte_size for where in slices)
        if in_memory + in_message > self.max_message_bytes:
            raise ResourceExhaustedError(
                f"the request's inputs hold {in_memory + in_message} bytes ({in_memory} of them in shared memory), "
                f"more than the server's limit of {self.max_message_bytes} bytes per request (--max-message-bytes, "
                f"LITE_MAX_MESSAGE_BYTES), in shared memory as in a message; send smaller or fewer inputs per "
                "request, or raise the limit"
            )

    def read_tensor(self, where: RegionSlice, datatype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
        """An input's raw bytes, read once its shape and size are checked against the server's limits:
        no more elements than ``max_tensor_elements``, exactly shape x element size bytes (BYTES: at
        most ``max_message_bytes``)."""
        count = element_count(shape, what)
        if count > self.max_tensor_elements:
            raise ResourceExhaustedError(
                f"{what} has shape {list(shape)}, {count} elements; the server's limit is {self.max_tensor_elements} "
                "elements per tensor (max_tensor_elements), in shared memory as in a message; send smaller tensors"
            )
        if datatype == "BYTES":
            if where.byte_size > self.max_message_bytes:
                raise ResourceExhaustedError(
                    f"{what}: {where.byte_size} bytes of BYTES data in shared memory, more than max_message_bytes "
                    f"{self.max_message_bytes}; send smaller tensors"
                )
        else:
            itemsize = numpy_dtype(datatype).itemsize
            if where.byte_size != count * itemsize:
                raise InvalidRequestError(
                    f"{what}: shared_memory_byte_size is {where.byte_size}, but shape {list(shape)} of {datatype} "
                    f"needs {count * itemsize} bytes ({count} elements x {itemsize} bytes)"
                )
        return where.read(what)

    def close(self) -> None:
        """Shutdown: unregister every region."""
        self._regions.clear()

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise UnsupportedError(self._refusal)
