"""Read an ONNX model (file, bytes or ``onnx.ModelProto``) into the converter's graph IR.

The converter works on ``onnx_ir`` (https://github.com/onnx/ir-py): a mutable graph whose values
know their producer and consumers, so passes rewrite in place. Weights stored in external data
files are mapped lazily, not copied, until a pass or the writer needs them (and only from inside
the model's folder: :mod:`converter.external_data`). Model-local functions are inlined, so every
pass sees plain ONNX nodes (within a size budget: :mod:`converter.functions`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_ir as ir

from converter.declared_types import DeclaredCast, cast_to_declared_types
from converter.dict_inputs import VectorizedInput, vectorize_inputs
from converter.errors import ModelImportError
from converter.external_data import check_external_data
from converter.functions import inline_functions
from converter.import_checks import check_model, checked_numpy, sort_if_unordered
from converter.zipmap import ZippedOutput, unzip_outputs

ModelSource = str | os.PathLike | bytes | onnx.ModelProto | ir.Model


@dataclass
class ImportedModel:
    model: ir.Model
    source: str  # file path, or a short description of an in-memory model
    sha256: str  # of the serialized source (weights in external files not included)
    size_bytes: int  # serialized size plus external data files
    external_data_dir: Path | None = None  # where its external data was found (None: it has none)
    zipped: list[ZippedOutput] = field(default_factory=list)  # ZipMap outputs written as tensors
    declared_casts: list[DeclaredCast] = field(default_factory=list)  # outputs cast to their declared type
    vectorized: list[VectorizedInput] = field(default_factory=list)  # DictVectorizer map inputs as tensors
    # External data reached through links into the model file's real folder: tensor -> location there.
    relocated_data: dict[str, str] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What the import rewrote for the lite format, one line each, for the report."""
        return [item.note() for item in [*self.zipped, *self.declared_casts, *self.vectorized]]

    def rewritten(self) -> bool:
        return bool(self.zipped or self.declared_casts or self.vectorized)


def import_onnx(source: ModelSource, external_data_dir: str | os.PathLike | None = None) -> ImportedModel:
    """Import ``source`` into an ``onnx_ir.Model``; raise :class:`ModelImportError` if unreadable.

    External data (weights in files beside the model) is read from the model file's folder, or
    from ``external_data_dir`` when given; a model given as bytes or a ModelProto has no folder,
    so its external data is refused unless ``external_data_dir`` names one (see
    :mod:`converter.external_data`).
    """
    if isinstance(source, ir.Model):
        folder, _ = check_external_data(source, external_data_dir, "<onnx_ir.Model>")
        return ImportedModel(source, "<onnx_ir.Model>", "", 0, folder)
    if isinstance(source, onnx.ModelProto):
        what = "<onnx.ModelProto>"
        data = source.SerializeToString()
        proto = onnx.ModelProto()
        proto.CopyFrom(source)  # the caller's model stays as it was
        rewrites = rewrite_for_lite(proto)
        model = _deserialize(_checked_proto(proto, what), what)
        folder, _ = check_external_data(model, external_data_dir, what)
        return ImportedModel(_inline_functions(model, what), what, _sha256(data), len(data), folder, *rewrites)
    if isinstance(source, bytes):
        what = "<bytes>"
        proto = _parse(source, what)
        rewrites = rewrite_for_lite(proto)
        model = _deserialize(_checked_proto(proto, what), what)
        folder, _ = check_external_data(model, external_data_dir, what)
        return ImportedModel(_inline_functions(model, what), what, _sha256(source), len(source), folder, *rewrites)
    path = Path(source)
    check_model_file(path)
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as err:  # onnx raises DecodeError, OSError, ValueError... name the file
        raise ModelImportError(f"{path}: not a readable ONNX model ({err}); check the file") from err
    rewrites = rewrite_for_lite(proto)
    model = _deserialize(_checked_proto(proto, str(path)), str(path))
    folder, relocated = check_external_data(model, path.parent if external_data_dir is None else external_data_dir,
                                            str(path), model_file=path)
    model = _inline_functions(model, str(path))
    return ImportedModel(model, str(path), _file_sha256(path), _model_size(model, path), folder, *rewrites,
                         relocated_data=relocated)


def rewrite_for_lite(
    proto: onnx.ModelProto,
) -> tuple[list[ZippedOutput], list[DeclaredCast], list[VectorizedInput]]:
    """Rewrite ``proto``'s inputs and outputs the lite format cannot hold as declared (ZipMap's
    and DictVectorizer's maps; types the producing node cannot make) into tensors it can;
    verification applies the same to the original, so both sides take and give the same."""
    return unzip_outputs(proto), cast_to_declared_types(proto), vectorize_inputs(proto)


def check_model_file(path: Path) -> None:
    """Raise :class:`ModelImportError` unless ``path`` is a regular, non-empty file: reading a
    FIFO would block until something writes to it, reading a device might never end."""
    try:
        mode = path.stat()
    except FileNotFoundError as err:
        raise ModelImportError(f"{path}: no such file; pass the path of a model file") from err
    except OSError as err:
        raise ModelImportError(f"{path}: cannot read it ({err.strerror})") from err
    if stat.S_ISDIR(mode.st_mode):
        raise ModelImportError(f"{path} is a directory; pass the path of a model file")
    if not stat.S_ISREG(mode.st_mode):
        raise ModelImportError(f"{path} is not a regular file (a pipe, socket or device); pass a model file")
    if mode.st_size == 0:
        raise ModelImportError(f"{path}: the file is empty, not a model")


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    if not data:
        raise ModelImportError(f"{what}: no data (0 bytes), not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:
        raise ModelImportError(f"{what}: not an ONNX model ({err})") from err
    return proto


def _checked_proto(proto: onnx.ModelProto, what: str) -> onnx.ModelProto:
    # Protobuf parses many non-ONNX byte strings (and empty ones) as a ModelProto with no graph.
    if not proto.HasField("graph"):
        raise ModelImportError(f"{what}: holds no graph, so it is not an ONNX model (or it is truncated)")
    _reject_maps(proto.graph, what)
    return proto


def _reject_maps(graph: onnx.GraphProto, what: str) -> None:
    """Raise :class:`ModelImportError` naming the first value typed as a map (or a sequence of maps).

    The lite format holds tensors and sequences of tensors; ai.onnx.ml's ZipMap, DictVectorizer
    and CastMap make or read maps (https://onnx.ai/onnx/repo-docs/IR.html, "Types"), which onnx_ir
    cannot read either: without this check the import failed with onnx_ir's "Map types are not
    supported yet" and a hint that the (valid) graph was malformed.
    """
    producers = {output: node for node in graph.node for output in node.output}
    declared = [("input", value) for value in graph.input] + [("output", value) for value in graph.output]
    for role, value in [*declared, *(("value", value) for value in graph.value_info)]:
        if not _holds_map(value.type):
            continue
        node = producers.get(value.name)
        made_by = f" (made by {node.op_type} node {node.name!r})" if node is not None else ""
        advice = "feed the model tensors instead"
        if node is not None and node.op_type == "ZipMap":
            advice = (f"its input {node.input[0]!r} holds the same numbers as a tensor: export without ZipMap "
                      "(skl2onnx: options={'zipmap': False}) or remove the node and make that tensor the output")
        elif role != "input":
            advice = "export the model with tensor outputs"
        raise ModelImportError(
            f"{what}: graph {graph.name!r} {role} {value.name!r} is a {_type_text(value.type)}{made_by}; "
            f"lite holds tensors and sequences of tensors, not maps: {advice}"
        )
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                _reject_maps(subgraph, what)


def _holds_map(value_type: onnx.TypeProto) -> bool:
    kind = value_type.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return _holds_map(value_type.sequence_type.elem_type)
    if kind == "optional_type":
        return _holds_map(value_type.optional_type.elem_type)
    return False


def _type_text(value_type: onnx.TypeProto) -> str:
    kind = value_type.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({onnx.TensorProto.DataType.Name(value_type.tensor_type.elem_type).lower()})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(value_type.map_type.key_type).lower()
        return f"map({key}, {_type_text(value_type.map_type.value_type)})"
    if kind == "sequence_type":
        return f"sequence({_type_text(value_type.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_text(value_type.optional_type.elem_type)})"
    return kind or "value of unknown type"


class _UndefinedInputNotes(logging.Filter):
    """Drops onnx_ir's warnings about node inputs no scope defines: :func:`check_model` refuses
    the first such input with the graph, node and value named, and the warnings (one per input,
    dozens for a model missing its weights) only buried that error."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return "cannot be found in any scope" not in message and not message.startswith("Caveat: The value is created")


def _deserialize(proto: onnx.ModelProto, what: str) -> ir.Model:
    notes = _UndefinedInputNotes()
    logger = logging.getLogger(ir.serde.__name__)
    logger.addFilter(notes)
    try:
        return ir.serde.deserialize_model(proto)
    except Exception as err:
        raise ModelImportError(f"{what}: the ONNX graph is malformed ({_root_cause(err)}); run onnx.checker on it") from err
    finally:
        logger.removeFilter(notes)


def _root_cause(err: BaseException) -> BaseException:
    # onnx_ir wraps the error once per enclosing graph and node ("Error calling _deserialize_graph
    # with: g"); the innermost one says what is wrong.
    seen = {id(err)}
    while (cause := err.__cause__ or err.__context__) is not None and id(cause) not in seen:
        seen.add(id(cause))
        err = cause
    return err


def _inline_functions(model: ir.Model, what: str) -> ir.Model:
    inline_functions(model, what)
    sort_if_unordered(model.graph)
    check_model(model, what)
    _detach_from_proto(model)
    return model


def _detach_from_proto(model: ir.Model) -> None:
    """Give every weight its own numpy array, so the parsed ModelProto can be freed.

    A tensor deserialized by onnx_ir keeps a reference into the protobuf message, and any one such
    reference keeps the whole message (all weights) alive. Weights replaced by a pass would then
    be held twice; detaching keeps conversion memory near one copy of the weights.
    """
    for graph in [model.graph, *model.graph.subgraphs()]:
        for value in graph.initializers.values():
            value.const_value = _detached(value.const_value)
        for node in graph:
            for name, attr in list(node.attributes.items()):
                if attr.type == ir.AttributeType.TENSOR:
                    node.attributes[name] = ir.AttrTensor(name, _detached(attr.value), doc_string=attr.doc_string)
                elif attr.type == ir.AttributeType.TENSORS:
                    node.attributes[name] = ir.AttrTensors(name, [_detached(t) for t in attr.value], doc_string=attr.doc_string)


def _detached(tensor: ir.TensorProtocol | None) -> ir.TensorProtocol | None:
    if isinstance(tensor, ir.StringTensor) or (tensor is not None and tensor.dtype == ir.DataType.STRING):
        checked_numpy(tensor)  # strings are kept as they are; their count must still fit the dims
        return tensor
    if not isinstance(tensor, ir.serde.TensorProtoTensor):
        return tensor
    # numpy() copies the bytes out of the message; nothing refers back to it afterwards.
    return ir.Tensor(checked_numpy(tensor), dtype=tensor.dtype, name=tensor.name, doc_string=tensor.doc_string)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _model_size(model: ir.Model, path: Path) -> int:
    size = path.stat().st_size
    external = set()
    for value in model.graph.initializers.values():
        if isinstance(value.const_value, ir.ExternalTensor):
            external.add(value.const_value.path)
    return size + sum(os.path.getsize(file) for file in external if os.path.exists(file))
