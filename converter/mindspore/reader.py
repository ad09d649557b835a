"""Read a .mindir file into a ``mind_ir.ModelProto`` (reference §1.1, §1.6).

A plain file is one serialized ``ModelProto`` with no header; an encrypted one starts with a block
magic (:mod:`converter.mindspore.encryption`). The parser is the one generated from
schema/mind_ir.proto (``train._generated.mind_ir_pb2``), shared with the train core's exporter.
Checks after parsing, after MindSpore's loader (``CheckModelConfigureInfo``): a main graph with
outputs is present, ``little_endian`` matches this host, ``mind_ir_version`` is a known version.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from converter.mindspore.encryption import decrypt, encryption_mode
from converter.mindspore.errors import EncryptedModelError, MindIRFormatError

MAX_MIND_IR_VERSION = 3  # IR_VERSION_WITH_SCALAR_GRAPH_HOLDER


@dataclass
class MindIRFile:
    model: Any  # train._generated.mind_ir_pb2.ModelProto
    source: str  # the path, or "<bytes>"
    base_dir: Path | None  # where external data locations are resolved
    sha256: str  # of the file as stored (encrypted bytes for an encrypted file)
    size_bytes: int


def read_mindir(
    source: str | os.PathLike | bytes, dec_key: bytes | None = None, dec_mode: str | None = None
) -> MindIRFile:
    """Parse (and, with ``dec_key``, decrypt) a MINDIR model; raise a typed error if unreadable."""
    if isinstance(source, bytes):
        data, what, base_dir = source, "<bytes>", None
    else:
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise MindIRFormatError(f"{path}: cannot read the MINDIR file ({err.strerror}); check the path") from err
        what, base_dir = str(path), path.resolve().parent
    digest = hashlib.sha256(data).hexdigest()
    mode = encryption_mode(data)
    if mode is not None:
        if dec_key is None:
            raise EncryptedModelError(
                f"{what} is encrypted ({mode}, MindSpore export with enc_key); pass its key: "
                f"lite convert --dec-key HEX --dec-mode {mode}, or convert(..., dec_key=b'...')"
            )
        data = decrypt(data, dec_key, dec_mode, what)
    from train._generated import mind_ir_pb2  # the one MINDIR schema, shared with the exporter

    model = mind_ir_pb2.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise MindIRFormatError(
            f"{what}: not a MINDIR model (protobuf decode failed: {err}); the file is damaged, "
            "truncated, or encrypted with a key that was not given"
        ) from err
    _check_text_fields(model, what)
    _check(model, what)
    return MindIRFile(model, what, base_dir, digest, len(data))


def _check_text_fields(message: Any, what: str) -> None:
    """Every string field must be valid UTF-8: protobuf's Python runtime hands undecodable proto2
    strings over as bytes, which would otherwise surface deep in the translation."""
    from google.protobuf.descriptor import FieldDescriptor

    stack = [message]
    while stack:
        current = stack.pop()
        for field, value in current.ListFields():
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                items = [*value.keys(), *value.values()]  # user_info: map<string, string>
            elif _is_repeated(field):
                items = list(value)
            else:
                items = [value]
            if any(isinstance(item, bytes) for item in items) and field.type != FieldDescriptor.TYPE_BYTES:
                raise MindIRFormatError(f"{what}: field {field.full_name} is not valid UTF-8; the file is damaged")
            if field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
                stack.extend(items)


def _is_repeated(field: Any) -> bool:
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == field.LABEL_REPEATED


def _check(model: Any, what: str) -> None:
    if not model.HasField("graph") or not model.graph.output:
        raise MindIRFormatError(
            f"{what}: not a MINDIR model (no main graph with outputs); the file is damaged or of another format"
        )
    host_little = sys.byteorder == "little"
    if model.HasField("little_endian") and model.little_endian != host_little:
        raise MindIRFormatError(
            f"{what}: written on a {'little' if model.little_endian else 'big'}-endian host, this host is "
            f"{sys.byteorder}-endian; MindSpore stores weights in host byte order, re-export on a "
            "matching host"
        )
    if model.mind_ir_version < 0 or model.mind_ir_version > MAX_MIND_IR_VERSION:
        raise MindIRFormatError(
            f"{what}: mind_ir_version {model.mind_ir_version} is unknown (this importer reads 0 to "
            f"{MAX_MIND_IR_VERSION}); the file is damaged or from a newer MindSpore"
        )
