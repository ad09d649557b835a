"""``export``: MindSpore's signature, suffix added to ``file_name`` (``lenet`` -> ``lenet.onnx``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from train.errors import ExportError

SUFFIXES = {"ONNX": ".onnx", "MINDIR": ".mindir"}


def export(
    net: Any, *inputs: Any, file_name: str | os.PathLike, file_format: str = "ONNX", **kwargs: Any
) -> Path:
    """Trace ``net`` on ``inputs`` and write ``file_name`` + suffix; returns the path written.

    ONNX: IR version 8, opset 17, batch dimension dynamic, BatchNormalization kept as is.
    """
    fmt = file_format.upper()
    if fmt not in SUFFIXES:
        raise ExportError(f"file_format must be one of {sorted(SUFFIXES)}, got {file_format!r}")
    path = Path(file_name)
    if path.suffix.lower() != SUFFIXES[fmt]:
        path = path.with_name(path.name + SUFFIXES[fmt])
    if fmt == "ONNX":
        from train.export.onnx_export import export_onnx

        return export_onnx(net, inputs, path, **kwargs)
    from train.export.mindir_export import export_mindir

    return export_mindir(net, inputs, path, **kwargs)
