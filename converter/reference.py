"""The original model as verification's reference runs it: the same rewrites of its inputs and
outputs as the import made (:func:`converter.importer.rewrite_for_lite`), and its external data
read in from where the import found it."""

from __future__ import annotations

import os

import onnx
import onnx.external_data_helper
import onnx_ir as ir

from converter.errors import ModelImportError
from converter.importer import ImportedModel, ModelSource, rewrite_for_lite


def original_proto(imported: ImportedModel, source: ModelSource) -> onnx.ModelProto:
    """The source model for ONNX Runtime, its external data (checked at import) read in: given
    only a serialized model, ONNX Runtime would look for the files in the working directory."""
    if isinstance(source, (str, os.PathLike)):
        try:
            proto = onnx.load(os.fspath(source), load_external_data=False)
        except Exception as err:  # read at import; now short of memory (DecodeError), or changed
            raise ModelImportError(
                f"{source}: cannot read it again for verification ({type(err).__name__}: {err}); "
                "free memory, or pass verify=False (--no-verify) to skip the comparison") from err
    elif isinstance(source, onnx.ModelProto):
        proto = source
    elif isinstance(source, ir.Model):
        proto = ir.to_proto(source)
    else:
        proto = onnx.load_from_string(source)
    if imported.rewritten():  # the reference's inputs and outputs as the converted model has them
        proto = _copy_proto(proto) if proto is source else proto
        rewrite_for_lite(proto)
    if imported.external_data_dir is None:
        return proto
    inlined = _copy_proto(proto)
    _relocate_external_data(inlined, imported.relocated_data)
    try:
        onnx.external_data_helper.load_external_data_for_model(inlined, os.fspath(imported.external_data_dir))
    except (OSError, ValueError, onnx.checker.ValidationError) as err:
        raise ModelImportError(
            f"{imported.source}: cannot read the external data for verification ({err}); "
            "pass verify=False (--no-verify) to skip the comparison"
        ) from err
    return inlined


def _relocate_external_data(proto: onnx.ModelProto, relocated: dict[str, str]) -> None:
    """Point the reference's tensors at the files the import read them from (through links into
    the model file's real folder, which onnx refuses to follow)."""
    graphs = [proto.graph] if relocated else []
    while graphs:
        graph = graphs.pop()
        for tensor in graph.initializer:
            if tensor.name in relocated and tensor.data_location == onnx.TensorProto.EXTERNAL:
                for entry in tensor.external_data:
                    if entry.key == "location":
                        entry.value = relocated[tensor.name]
        for node in graph.node:
            for attribute in node.attribute:
                graphs.extend([attribute.g] if attribute.HasField("g") else attribute.graphs)


def _copy_proto(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy
