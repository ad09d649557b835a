"""``import_mindir``: a .mindir file to the converter's ``ImportedModel`` (onnx_ir graph).

Reading and decryption are :mod:`converter.mindspore.reader`; the graph translation is
:mod:`converter.mindspore.translate`; the ONNX model it produces goes through the converter's own
ONNX import, so every pass applies unchanged.
"""

from __future__ import annotations

import os

import onnx

from converter.importer import ImportedModel, import_onnx
from converter.mindspore.errors import MindIRFormatError
from converter.mindspore.reader import read_mindir
from converter.mindspore.translate import GraphTranslator

MindIRSource = str | os.PathLike | bytes


def mindir_to_onnx(
    source: MindIRSource,
    *,
    dec_key: bytes | None = None,
    dec_mode: str | None = None,
    allow_custom: bool = False,
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The ONNX model equivalent to a MINDIR model, and facts about the source
    (``source``, ``sha256``, ``size_bytes``, ``custom``: nodes kept as custom ops)."""
    file = read_mindir(source, dec_key, dec_mode)
    translator = GraphTranslator(file.model, file.base_dir, file.source, allow_custom)
    try:
        proto = translator.translate()
    except RecursionError as err:
        raise MindIRFormatError(f"{file.source}: nesting too deep; the file is damaged") from err
    facts = {
        "source": file.source,
        "sha256": file.sha256,
        "size_bytes": str(file.size_bytes),
        "custom": "; ".join(f"{n}: {p} ({r})" for n, p, r in translator.custom),
    }
    return proto, facts


def import_mindir(
    source: MindIRSource,
    *,
    dec_key: bytes | None = None,
    dec_mode: str | None = None,
    allow_custom: bool = False,
) -> tuple[ImportedModel, onnx.ModelProto]:
    """Import a MINDIR model; return the imported graph and the ONNX model it was built from
    (the reference that verification runs on ONNX Runtime)."""
    proto, facts = mindir_to_onnx(source, dec_key=dec_key, dec_mode=dec_mode, allow_custom=allow_custom)
    imported = import_onnx(proto)
    imported.source = facts["source"]
    imported.sha256 = facts["sha256"]
    imported.size_bytes = int(facts["size_bytes"])
    return imported, proto
