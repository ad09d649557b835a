"""MindSpore inputs for the converter: MINDIR models, and .ckpt checkpoints plus a network.

* :func:`import_mindir` / :func:`mindir_to_onnx`: a ``.mindir`` file (plain, encrypted with a
  key, or with external weights) translated primitive by primitive into ONNX (opset 17), then
  imported like any ONNX model (docs/mindspore.md lists the primitives);
* :func:`checkpoint_to_onnx`: a ``.ckpt`` (MindSpore's or the train core's) loaded strictly into
  a network built from ``module:Callable`` with the train core, exported to ONNX in memory;
* :func:`import_mindspore`: the dispatch ``converter.convert`` uses, by file extension.

Format facts: MindSpore's ``mind_ir.proto`` (MINDIR) and ``checkpoint.proto`` (.ckpt), kept in schema/.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import onnx

from converter.errors import InvalidOptionError
from converter.importer import ImportedModel, import_onnx
from converter.mindspore.checkpoint import checkpoint_to_onnx
from converter.mindspore.errors import (
    CheckpointImportError,
    EncryptedModelError,
    MindIRFormatError,
    NetworkDefinitionError,
)
from converter.mindspore.mindir import import_mindir, mindir_to_onnx

MINDIR_SUFFIX = ".mindir"
CKPT_SUFFIX = ".ckpt"


def is_mindspore_source(source: object, network: str | None = None) -> bool:
    """True for a path ending in .mindir or .ckpt, or whenever a network definition is given."""
    if network is not None:
        return True
    if isinstance(source, (str, os.PathLike)):
        return Path(source).suffix.lower() in (MINDIR_SUFFIX, CKPT_SUFFIX)
    return False


def import_mindspore(
    source: str | os.PathLike,
    *,
    network: str | None = None,
    input_shape: Sequence[int] | None = None,
    dec_key: bytes | None = None,
    dec_mode: str | None = None,
    allow_custom: bool = False,
) -> tuple[ImportedModel, onnx.ModelProto, list[str]]:
    """Import a .mindir, or a .ckpt with ``network``; return the model, its ONNX form, warnings."""
    suffix = Path(source).suffix.lower()
    warnings: list[str] = []
    if suffix == CKPT_SUFFIX or network is not None:
        if suffix != CKPT_SUFFIX:
            raise InvalidOptionError(f"--network goes with a .ckpt checkpoint, got {source}")
        if network is None or not input_shape:
            raise InvalidOptionError(
                f"{source}: a checkpoint holds only weights; give the network and a sample input shape, "
                "e.g. --network train.models:LeNet5 --input-shape 1,1,32,32"
            )
        proto, facts = checkpoint_to_onnx(source, network, input_shape, dec_key=dec_key, dec_mode=dec_mode)
        if facts["skipped"]:
            warnings.append(f"checkpoint entries that are not network parameters were skipped: {facts['skipped']}")
        imported = import_onnx(proto)
    elif suffix == MINDIR_SUFFIX:
        proto, facts = mindir_to_onnx(source, dec_key=dec_key, dec_mode=dec_mode, allow_custom=allow_custom)
        if facts["custom"]:
            warnings.append(f"MINDIR nodes kept as custom ops: {facts['custom']}")
        imported = import_onnx(proto)
    else:
        raise InvalidOptionError(f"{source}: not a MindSpore file (.mindir, or .ckpt with --network)")
    imported.source = facts["source"]
    imported.sha256 = facts["sha256"]
    imported.size_bytes = int(facts["size_bytes"])
    return imported, proto, warnings


__all__ = [
    "CheckpointImportError",
    "EncryptedModelError",
    "MindIRFormatError",
    "NetworkDefinitionError",
    "checkpoint_to_onnx",
    "import_mindir",
    "import_mindspore",
    "is_mindspore_source",
    "mindir_to_onnx",
]
