"""Checks the commands make on a model file before anything reads it or an engine binds it.

:func:`lite.format.load` verifies a .lite file's structure (offsets, sizes, enums, indices) and
refuses pipes and devices. These are the semantic checks the engines rely on that the reader does
not make (yet): an opset version outside ONNX's range made the ONNX Runtime lowering fail with a
``TypeError`` traceback (``onnx.defs.get_schema`` takes a C int), and a ``fused_activation`` that
is not a known name, or whose ``fused_activation_params`` are not FLOATS of the right count,
failed with ``AttributeError``/``IndexError`` in the lowering or in ``inspect --graph``. A file
failing them is refused with :class:`~lite.errors.ModelFormatError` naming the node.
"""

from __future__ import annotations

import os
import stat

from lite.errors import ModelFormatError
from lite.format import ir, load
from lite.ops import fused_activation

MAX_OPSET_VERSION = (1 << 31) - 1  # ONNX opset versions are positive and fit a C int


def regular_file(path: str | os.PathLike, what: str = "model file") -> None:
    """Raise unless ``path`` is a regular file: opening a FIFO blocks until a writer comes, and
    reading a device may never end. A missing path is left to the reader's own message."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise ModelFormatError(f"{path} is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        raise ModelFormatError(f"{path} is not a regular file (a pipe, socket or device); give a {what}")


def load_checked(path: str | os.PathLike) -> ir.Model:
    """:func:`lite.format.load` of a regular file, then :func:`check_model`."""
    regular_file(path)
    model = load(path)
    check_model(model, str(path))
    return model


def check_model(model: ir.Model, origin: str) -> None:
    """Raise :class:`ModelFormatError` if ``model`` breaks a rule in the module docstring."""
    for domain, version in model.opset_imports.items():
        if not 1 <= version <= MAX_OPSET_VERSION:
            raise ModelFormatError(
                f"{origin}: opset version {version} of domain {domain or 'ai.onnx'!r} is not a version number "
                f"(1 to {MAX_OPSET_VERSION}); the file is damaged"
            )
    for graph in model.graphs:
        for position, node in enumerate(graph.nodes):
            if fused_activation.ATTRIBUTE in node.attributes or fused_activation.PARAMS_ATTRIBUTE in node.attributes:
                where = f"{origin}: graph {graph.name!r} node {position} ({node.name or node.op_type!r})"
                _check_fused_activation(node, where)


def _check_fused_activation(node: ir.Node, where: str) -> None:
    kind = node.attributes.get(fused_activation.ATTRIBUTE)
    if kind is None:
        raise ModelFormatError(f"{where}: has {fused_activation.PARAMS_ATTRIBUTE} without {fused_activation.ATTRIBUTE}")
    if kind.type != ir.AttributeType.STRING:
        raise ModelFormatError(
            f"{where}: {fused_activation.ATTRIBUTE} is {kind.type.name}, expected a STRING naming the activation"
        )
    try:
        name = bytes(kind.value).decode()
    except UnicodeDecodeError as err:
        raise ModelFormatError(f"{where}: {fused_activation.ATTRIBUTE} is not UTF-8 text; the file is damaged") from err
    params_attribute = node.attributes.get(fused_activation.PARAMS_ATTRIBUTE)
    params: list[float] = []
    if params_attribute is not None:
        if params_attribute.type != ir.AttributeType.FLOATS:
            raise ModelFormatError(
                f"{where}: {fused_activation.PARAMS_ATTRIBUTE} is {params_attribute.type.name}, expected FLOATS"
            )
        params = [float(value) for value in params_attribute.value]
    reason = fused_activation.check(name, params)
    if reason is not None:
        raise ModelFormatError(f"{where}: {reason}; the file is damaged")
