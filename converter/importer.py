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
from converter.errors import InvalidOptionError, ModelImportError
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


def parse_input_shape(text: str) -> tuple[str, list[int | str]]:
    """Parse ``name:1,3,224,224`` (a dim may be a symbolic name, e.g. ``input:N,3,224,224``)."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name or not dims:
        raise InvalidOptionError(f"--input-shape {text!r}: expected NAME:D0,D1,... e.g. input:1,3,224,224")
    shape: list[int | str] = []
    for dim in dims.split(","):
        dim = dim.strip()
        if dim.lstrip("-").isdigit():
            if int(dim) < 0:
                raise InvalidOptionError(f"--input-shape {text!r}: dimension {dim} is negative")
            shape.append(int(dim))
        elif dim.isidentifier():
            shape.append(dim)
        else:
            raise InvalidOptionError(f"--input-shape {text!r}: dimension {dim!r} is neither a size nor a name")
    return name, shape


def apply_input_shapes(
    model: ir.Model, input_shapes: dict[str, list[int | str]], dynamic_batch: bool
) -> list[str]:
    """Fix graph input shapes (``--input-shape``) and/or make the batch dim symbolic.

    Shapes previously inferred for intermediate values are dropped, so shape inference recomputes
    them from the new inputs. Returns warnings.
    """
    graph = model.graph
    warnings: list[str] = []
    inputs = {value.name: value for value in graph.inputs}
    unknown = sorted(set(input_shapes) - set(inputs))
    if unknown:
        raise InvalidOptionError(
            f"--input-shape names {unknown}, which are not inputs of the model; inputs are {sorted(inputs)}"
        )
    for name, shape in input_shapes.items():
        value = inputs[name]
        if value.shape is not None and len(value.shape) != len(shape):
            raise InvalidOptionError(
                f"--input-shape {name}: rank {len(shape)} given, the model's input has rank "
                f"{len(value.shape)} ({value.shape})"
            )
        if value.shape is not None:
            _check_fixed_sizes(name, list(value.shape), shape)
    named = _named_sizes(inputs, input_shapes)
    for name, shape in input_shapes.items():
        inputs[name].shape = ir.Shape(shape)
    for value in [*inputs.values(), *graph.outputs]:
        if value.name not in input_shapes and value.shape is not None and any(
                _dim_name(dim) in named for dim in value.shape):
            value.shape = ir.Shape([named.get(_dim_name(dim), dim) if _dim_name(dim) else dim for dim in value.shape])
    if dynamic_batch:
        _check_one_batch([value for value in graph.inputs if not value.is_initializer()])
        for value in graph.inputs:
            if value.is_initializer() or value.shape is None or len(value.shape) == 0:
                continue
            dims = list(value.shape)
            dims[0] = "batch"
            value.shape = ir.Shape(dims)
        for value in graph.outputs:
            if value.shape is not None and len(value.shape) > 0:
                dims = list(value.shape)
                dims[0] = "batch"
                value.shape = ir.Shape(dims)
    if input_shapes or dynamic_batch:
        _forget_intermediate_shapes(graph)
    return warnings


def _dim_name(dim) -> str | None:
    return dim.value if isinstance(dim, ir.SymbolicDim) else None


def _named_sizes(inputs: dict[str, ir.Value], input_shapes: dict[str, list[int | str]]) -> dict[str, int]:
    """The sizes ``--input-shape`` gives the model's named dimensions: a name is one size across
    the graph, so fixing ``input[batch, sequence]`` at 1,576 fixes a state's ``[2, batch, 128]``
    at batch 1 too. Two sizes for one name are an error."""
    named: dict[str, tuple[int, str]] = {}
    for name, shape in input_shapes.items():
        dims = inputs[name].shape
        for axis, (dim, size) in enumerate(zip(dims or (), shape)):
            label = _dim_name(dim)
            if label is None or not isinstance(size, int):
                continue
            first = named.setdefault(label, (size, f"{name} dimension {axis}"))
            if first[0] != size:
                raise InvalidOptionError(
                    f"--input-shape gives the model's dimension {label!r} two sizes: {first[0]} ({first[1]}) and "
                    f"{size} ({name} dimension {axis}); a named dimension is one size across the inputs"
                )
    return {label: size for label, (size, _) in named.items()}


def _check_one_batch(inputs: list[ir.Value]) -> None:
    """``--dynamic-batch`` names every input's first dimension "batch": inputs whose first sizes
    the model fixes differently (a [1, T] text beside a [2, 1, H] recurrent state) cannot share it."""
    fixed = {value.name: value.shape[0] for value in inputs
             if value.shape is not None and len(value.shape) > 0 and isinstance(value.shape[0], int)}
    if len(set(fixed.values())) > 1:
        raise batch_sizes_differ(fixed)


def batch_sizes_differ(sizes: dict[str, int]) -> InvalidOptionError:
    """The error for inputs whose first dimensions cannot be one batch (``sizes``: name -> size)."""
    listing = ", ".join(f"{name}: {size}" for name, size in sorted(sizes.items()))
    return InvalidOptionError(
        f"--dynamic-batch: the inputs' first dimensions differ ({listing}), so they cannot all be one batch "
        "dimension; convert without --dynamic-batch and name the symbolic sizes with --input-shape"
    )


def _check_fixed_sizes(name: str, model_dims: list, given: list[int | str]) -> None:
    """A size the model fixes cannot be replaced by another: its weights and reshapes were built
    for it, and the written model would fail or compute garbage at run time."""
    changed = [(axis, dim, size) for axis, (dim, size) in enumerate(zip(model_dims, given))
               if isinstance(dim, int) and isinstance(size, int) and dim != size]
    if not changed:
        return
    listing = "; ".join(f"dimension {axis} is fixed at {dim} by the model, {size} given" for axis, dim, size in changed)
    hint = ("; --dynamic-batch makes the leading dimension symbolic" if any(axis == 0 for axis, _, _ in changed)
            else "")
    raise InvalidOptionError(
        f"--input-shape {name}:{','.join(str(size) for size in given)}: {listing} (the model's input is "
        f"{name}[{', '.join(str(dim) for dim in model_dims)}]); only symbolic dimensions can be set: "
        f"give the model's size there{hint}"
    )


def _forget_intermediate_shapes(graph: ir.Graph) -> None:
    outputs = set(graph.outputs)
    for node in graph.all_nodes():
        for value in node.outputs:
            if value not in outputs:
                value.shape = None
