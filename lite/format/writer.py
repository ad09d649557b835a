"""Writing :class:`lite.format.ir.Model` as a .lite file (layout: ``schema/model.fbs``).

The flatbuffer holds the structure; weight bytes follow it in a data section, each buffer on a
64-byte boundary, so the reader can view them in place. Writing is deterministic: the same model
gives the same bytes.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable

import flatbuffers
import numpy as np

from lite.atomic import atomic_write
from lite.errors import ModelFormatError
from lite.format import ir
from lite.format._generated import model_generated as fb
from lite.format.dtypes import DataType, byte_size, is_subbyte, storage_dtype

ALIGNMENT = 64
_GRANULARITY = {"tensor": fb.QuantGranularity.PER_TENSOR, "axis": fb.QuantGranularity.PER_AXIS,
                "block": fb.QuantGranularity.PER_BLOCK}


def save(model: ir.Model, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` atomically (temporary file, fsync, rename)."""
    header, payloads = _encode(model)
    with atomic_write(path) as handle:
        _write(handle, header, payloads)


def to_bytes(model: ir.Model) -> bytes:
    """The .lite encoding of ``model`` in memory (for small models and tests)."""
    header, payloads = _encode(model)
    out = io.BytesIO()
    _write(out, header, payloads)
    return out.getvalue()


def _align(value: int) -> int:
    return -(-value // ALIGNMENT) * ALIGNMENT


def _write(handle, header: bytes, payloads: list[tuple[int, np.ndarray]]) -> None:
    handle.write(header)
    data_start = _align(len(header))
    position = len(header)
    for offset, array in payloads:
        gap = data_start + offset - position
        handle.write(b"\0" * gap)
        view = memoryview(array.reshape(-1).view(np.uint8))
        handle.write(view)
        position = data_start + offset + view.nbytes
    # Pad the end too, so the data section is a whole number of alignment units.
    handle.write(b"\0" * (_align(position) - position))


def _encode(model: ir.Model) -> tuple[bytes, list[tuple[int, np.ndarray]]]:
    encoder = _Encoder()
    return encoder.model(model), encoder.payloads


class _Encoder:
    def __init__(self) -> None:
        self.builder = flatbuffers.Builder(4096)
        self.buffers: list[tuple[int, int]] = [(0, 0)]  # index 0: the empty sentinel
        self.payloads: list[tuple[int, np.ndarray]] = []
        self.data_size = 0

    # -- helpers ---------------------------------------------------------------------------
    def string(self, value: str | bytes) -> int:
        return self.builder.CreateString(value)

    def vector(self, values: Iterable, dtype: str) -> int:
        return self.builder.CreateNumpyVector(np.asarray(values, dtype=dtype).reshape(-1))

    def table_vector(self, start, offsets: list[int]) -> int:
        start(self.builder, len(offsets))
        for offset in reversed(offsets):
            self.builder.PrependUOffsetTRelative(offset)
        return self.builder.EndVector()

    def string_vector(self, start, values: Iterable[str | bytes]) -> int:
        return self.table_vector(start, [self.string(v) for v in values])

    def add_buffer(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        offset = _align(self.data_size)
        self.buffers.append((offset, array.nbytes))
        self.payloads.append((offset, array))
        self.data_size = offset + array.nbytes
        return len(self.buffers) - 1

    # -- tables ----------------------------------------------------------------------------
    def model(self, model: ir.Model) -> bytes:
        b = self.builder
        graphs = [self.graph(g, index) for index, g in enumerate(model.graphs)]
        opsets = []
        for domain, version in model.opset_imports.items():
            domain_offset = self.string(domain)
            fb.OperatorSetIdStart(b)
            fb.OperatorSetIdAddDomain(b, domain_offset)
            fb.OperatorSetIdAddVersion(b, int(version))
            opsets.append(fb.OperatorSetIdEnd(b))
        metadata = []
        for key, value in model.metadata.items():
            key_offset, value_offset = self.string(key), self.string(value)
            fb.KeyValueStart(b)
            fb.KeyValueAddKey(b, key_offset)
            fb.KeyValueAddValue(b, value_offset)
            metadata.append(fb.KeyValueEnd(b))
        buffers = []
        for offset, length in self.buffers:
            fb.BufferStart(b)
            fb.BufferAddOffset(b, offset)
            fb.BufferAddLength(b, length)
            buffers.append(fb.BufferEnd(b))
        graphs_vec = self.table_vector(fb.ModelStartGraphsVector, graphs)
        opsets_vec = self.table_vector(fb.ModelStartOpsetImportsVector, opsets)
        metadata_vec = self.table_vector(fb.ModelStartMetadataVector, metadata)
        buffers_vec = self.table_vector(fb.ModelStartBuffersVector, buffers)
        fb.ModelStart(b)
        fb.ModelAddVersionMajor(b, model.version[0])
        fb.ModelAddVersionMinor(b, model.version[1])
        fb.ModelAddGraphs(b, graphs_vec)
        fb.ModelAddOpsetImports(b, opsets_vec)
        fb.ModelAddMetadata(b, metadata_vec)
        fb.ModelAddBuffers(b, buffers_vec)
        b.FinishSizePrefixed(fb.ModelEnd(b), file_identifier=b"LITE")
        return bytes(b.Output())

    def graph(self, graph: ir.Graph, index: int) -> int:
        b = self.builder
        tensors = [self.tensor(t, f"graph {index} ({graph.name!r})") for t in graph.tensors]
        nodes = [self.node(n) for n in graph.nodes]
        name = self.string(graph.name)
        tensors_vec = self.table_vector(fb.GraphStartTensorsVector, tensors)
        nodes_vec = self.table_vector(fb.GraphStartNodesVector, nodes)
        inputs = self.vector(graph.inputs, "<i4")
        outputs = self.vector(graph.outputs, "<i4")
        captures = self.vector(graph.captures, "<i4")
        fb.GraphStart(b)
        fb.GraphAddName(b, name)
        fb.GraphAddTensors(b, tensors_vec)
        fb.GraphAddNodes(b, nodes_vec)
        fb.GraphAddInputs(b, inputs)
        fb.GraphAddOutputs(b, outputs)
        fb.GraphAddCaptures(b, captures)
        return fb.GraphEnd(b)

    def tensor(self, tensor: ir.Tensor, where: str) -> int:
        b = self.builder
        buffer_index = 0
        strings = None
        if tensor.data is not None:
            data = _checked_data(tensor, where)
            if tensor.dtype == DataType.STRING:
                strings = self.string_vector(
                    fb.TensorStartStringDataVector,
                    [v if isinstance(v, (bytes, str)) else str(v) for v in data.reshape(-1)],
                )
            else:
                buffer_index = self.add_buffer(data)
        dims = []
        for dim in tensor.shape or ():
            param = self.string(dim) if isinstance(dim, str) else None
            fb.DimStart(b)
            if isinstance(dim, str):
                fb.DimAddParam(b, param)
            elif dim is not None:
                fb.DimAddValue(b, int(dim))
            dims.append(fb.DimEnd(b))
        shape = self.table_vector(fb.TensorStartShapeVector, dims)
        quant = self.quant(tensor.quant) if tensor.quant is not None else None
        name = self.string(tensor.name)
        doc = self.string(tensor.doc) if tensor.doc else None
        fb.TensorStart(b)
        fb.TensorAddName(b, name)
        fb.TensorAddDtype(b, int(tensor.dtype))
        fb.TensorAddHasShape(b, tensor.shape is not None)
        fb.TensorAddShape(b, shape)
        fb.TensorAddBuffer(b, buffer_index)
        if strings is not None:
            fb.TensorAddStringData(b, strings)
            fb.TensorAddIsStringConstant(b, True)
        if quant is not None:
            fb.TensorAddQuant(b, quant)
        if doc is not None:
            fb.TensorAddDoc(b, doc)
        return fb.TensorEnd(b)

    def quant(self, quant: ir.QuantParams) -> int:
        b = self.builder
        scale = self.vector(quant.scale, "<f4")
        zero_point = self.vector(quant.zero_point, "<i8")
        if quant.axis is None:
            granularity = _GRANULARITY["tensor"]
        else:
            granularity = _GRANULARITY["block" if quant.block_size else "axis"]
        fb.QuantParamsStart(b)
        fb.QuantParamsAddGranularity(b, granularity)
        fb.QuantParamsAddAxis(b, quant.axis or 0)
        fb.QuantParamsAddBlockSize(b, quant.block_size)
        fb.QuantParamsAddBits(b, quant.bits)
        fb.QuantParamsAddSigned(b, quant.signed)
        fb.QuantParamsAddSymmetric(b, quant.symmetric)
        fb.QuantParamsAddScale(b, scale)
        fb.QuantParamsAddZeroPoint(b, zero_point)
        return fb.QuantParamsEnd(b)

    def node(self, node: ir.Node) -> int:
        b = self.builder
        attributes = [self.attribute(name, a, node) for name, a in node.attributes.items()]
        op_type, domain, name = self.string(node.op_type), self.string(node.domain), self.string(node.name)
        inputs = self.vector(node.inputs, "<i4")
        outputs = self.vector(node.outputs, "<i4")
        attributes_vec = self.table_vector(fb.NodeStartAttributesVector, attributes)
        fb.NodeStart(b)
        fb.NodeAddOpType(b, op_type)
        fb.NodeAddDomain(b, domain)
        fb.NodeAddName(b, name)
        fb.NodeAddInputs(b, inputs)
        fb.NodeAddOutputs(b, outputs)
        fb.NodeAddAttributes(b, attributes_vec)
        return fb.NodeEnd(b)

    def attribute(self, name: str, attribute: ir.Attribute, node: ir.Node) -> int:
        b = self.builder
        kind, value = ir.AttributeType(attribute.type), attribute.value
        where = f"attribute {name!r} of node {node.name!r} ({node.op_type})"
        members = {}
        try:
            if kind == ir.AttributeType.STRING:
                members["s"] = self.string(value)
            elif kind == ir.AttributeType.TENSOR:
                members["t"] = self.tensor(value, where)
            elif kind == ir.AttributeType.FLOATS:
                members["floats"] = self.vector(value, "<f4")
            elif kind == ir.AttributeType.INTS:
                members["ints"] = self.vector(value, "<i8")
            elif kind == ir.AttributeType.STRINGS:
                members["strings"] = self.string_vector(fb.AttributeStartStringsVector, value)
            elif kind == ir.AttributeType.TENSORS:
                tensors = [self.tensor(t, where) for t in value]
                members["tensors"] = self.table_vector(fb.AttributeStartTensorsVector, tensors)
            elif kind == ir.AttributeType.GRAPHS:
                members["graphs"] = self.vector(value, "<i4")
        except (TypeError, ValueError, OverflowError) as err:
            raise ModelFormatError(f"cannot write {where}: {err}") from err
        name_offset = self.string(name)
        fb.AttributeStart(b)
        fb.AttributeAddName(b, name_offset)
        fb.AttributeAddType(b, int(kind))
        if kind == ir.AttributeType.FLOAT:
            fb.AttributeAddF(b, float(value))
        elif kind == ir.AttributeType.INT:
            fb.AttributeAddI(b, int(value))
        elif kind == ir.AttributeType.GRAPH:
            fb.AttributeAddG(b, int(value))
        adders = {"s": fb.AttributeAddS, "t": fb.AttributeAddT, "floats": fb.AttributeAddFloats,
                  "ints": fb.AttributeAddInts, "strings": fb.AttributeAddStrings,
                  "tensors": fb.AttributeAddTensors, "graphs": fb.AttributeAddGraphs}
        for member, offset in members.items():
            adders[member](b, offset)
        return fb.AttributeEnd(b)


def _checked_data(tensor: ir.Tensor, where: str) -> np.ndarray:
    """The constant's data, checked against its declared dtype and shape."""
    data = np.asarray(tensor.data)
    label = f"constant {tensor.name!r} in {where}"
    if tensor.shape is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in tensor.shape):
        raise ModelFormatError(f"cannot write {label}: a constant needs a fixed shape, got {tensor.shape}")
    count = int(np.prod(tensor.shape, dtype=np.int64))
    if tensor.dtype == DataType.STRING:
        if data.size != count:
            raise ModelFormatError(f"cannot write {label}: {data.size} strings for shape {tensor.shape}")
        return data
    expected = storage_dtype(tensor.dtype)
    if data.dtype != expected:
        raise ModelFormatError(
            f"cannot write {label}: data is {data.dtype}, element type {tensor.dtype.name} is stored as {expected}"
        )
    if is_subbyte(tensor.dtype):
        if data.nbytes != byte_size(tensor.dtype, count):
            raise ModelFormatError(
                f"cannot write {label}: {tensor.dtype.name} data for shape {tensor.shape} must be "
                f"{byte_size(tensor.dtype, count)} packed bytes, got {data.nbytes}"
            )
        return data.reshape(-1)
    if data.size != count:
        raise ModelFormatError(f"cannot write {label}: {data.size} elements for shape {tensor.shape}")
    return data
