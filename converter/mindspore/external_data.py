"""Parameters stored outside the .mindir file (MindSpore's split save, reference §1.5).

Above 1 GiB of parameters ``mindspore.export`` writes ``<name>_graph.mindir`` and the weights to
``<name>_variables/data_0``, ``data_1``, ... Each data file starts with a 64-byte header whose
byte 0 is 1 on little-endian hosts (the other bytes are 0); tensors follow, each padded to a
64-byte boundary. ``TensorProto.external_data`` holds ``location`` (relative to the folder of the
.mindir file), ``offset`` (from the start of the file, header included) and ``length`` in bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from converter.contained_files import contained_file
from converter.mindspore.errors import MindIRFormatError

HEADER_BYTES = 64


def read_external(external: Any, base_dir: Path | None, expected: int, what: str) -> bytes:
    """The ``length`` bytes at ``offset`` of ``location``, checked against the header and dims."""
    if base_dir is None:
        raise MindIRFormatError(
            f"{what}: stored in external data {external.location!r}, which needs the model's folder; "
            "convert the .mindir from its file path, not from bytes"
        )
    path = _resolve(base_dir, external.location, what)
    offset, length = int(external.offset), int(external.length)
    if length != expected:
        raise MindIRFormatError(f"{what}: external data length {length} does not match its dims ({expected} bytes)")
    try:
        with path.open("rb") as stream:
            header = stream.read(HEADER_BYTES)
            size = path.stat().st_size
            if len(header) < HEADER_BYTES:
                raise MindIRFormatError(f"{what}: {path} is shorter than its 64-byte header; the file is damaged")
            _check_header(header, path, what)
            if offset < HEADER_BYTES or offset + length > size:
                raise MindIRFormatError(
                    f"{what}: external data [{offset}, {offset + length}) lies outside {path} "
                    f"(data from byte {HEADER_BYTES} to {size}); the file is damaged or truncated"
                )
            stream.seek(offset)
            return stream.read(length)
    except OSError as err:
        raise MindIRFormatError(f"{what}: cannot read external data {path}: {err.strerror}") from err


def _resolve(base_dir: Path, location: str, what: str) -> Path:
    """``base_dir / location`` resolved, if it is a regular file inside ``base_dir``: as for ONNX
    external data (converter.contained_files), a symlink out of the model's folder is refused, since
    its bytes would be copied into the written model's weights."""
    found = contained_file(base_dir, location)
    if found.problem:
        raise MindIRFormatError(f"{what}: " + _REFUSALS[found.problem].format(
            location=location, path=found.path, real=found.real, detail=found.detail))
    return found.real


_REFUSALS = {
    "location": "external data location {location!r} must be a relative path inside the model's folder",
    "missing": "external data file {path} is missing; keep the <name>_variables folder next to the .mindir",
    "unresolved": "cannot resolve external data file {path} ({detail})",
    "outside": "external data file {path} resolves to {real}, outside the model's folder {detail}; external data "
               "must stay inside it: copy the model's folder with the links followed (cp -rL MODEL_DIR DIR) and "
               "convert DIR's .mindir",
    "special": "external data file {path} is not a regular file (a folder, pipe or device)",
}


def _check_header(header: bytes, path: Path, what: str) -> None:
    little = header[0] == 1
    if header[0] not in (0, 1) or any(header[1:]):
        raise MindIRFormatError(f"{what}: {path} does not start with MindSpore's 64-byte data header")
    if little != (sys.byteorder == "little"):
        raise MindIRFormatError(
            f"{what}: {path} was written on a {'little' if little else 'big'}-endian host; this host is "
            f"{sys.byteorder}-endian, so the weights cannot be read as stored"
        )
