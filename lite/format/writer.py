"""Writing :class:`lite.format.ir.Model` as a .lite file (layout: ``schema/model.fbs``).

The flatbuffer holds the structure; weight bytes follow it in a data section, each buffer on a
64-byte boundary, so the reader can view them in place (:mod:`lite.format.data_section`). Writing
is deterministic: the same model gives the same bytes.

A model of format 2.x (the default is :data:`ir.FORMAT_VERSION`) is written compactly: QDQ groups
become tensors with implied nodes (:mod:`lite.format.qdq`), from 2.1 int32 bias scales that equal
input scale × weight scales are left out for the reader to recompute
(:mod:`lite.format.implied_scale`; a 2.1 model that has none is stamped 2.0, so 2.0 readers read
it), all-zero zero points are left out,
short strings, dimensions, shapes, attributes and quantization parameters are written once and
shared, and empty fields are left out. A model whose ``version`` is 1.x is written as format 1.0
writers wrote it, byte for byte, so 1.x readers read it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable

import flatbuffers
import numpy as np

from lite.atomic import atomic_write
from lite.errors import ModelFormatError
from lite.format import data_section, implied_scale, ir, qdq
from lite.format._generated import model_generated as fb
from lite.format.data_section import ALIGNMENT as ALIGNMENT  # where the tests and tools took it from
from lite.format.dtypes import DataType
from lite.format.shared_fields import attribute_key, attribute_value_cost, vector_cost
from lite.format.verifier import SHARED_WALK_COST

_GRANULARITY = {"tensor": fb.QuantGranularity.PER_TENSOR, "axis": fb.QuantGranularity.PER_AXIS,
                "block": fb.QuantGranularity.PER_BLOCK}
COMPACT_SINCE = (2, 0)
_ONE_BYTE_FIELDS = {
    fb.TensorAddDtype, fb.TensorAddHasShape, fb.TensorAddIsStringConstant, fb.TensorAddImpliedQdq,
    fb.QuantParamsAddGranularity, fb.QuantParamsAddBits, fb.QuantParamsAddSigned, fb.QuantParamsAddSymmetric,
    fb.QuantParamsAddImpliedScale,
}


def save(model: ir.Model, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` atomically (temporary file, fsync, rename)."""
    header, payloads = _encode(model)
    with atomic_write(path) as handle:
        data_section.write(handle, header, payloads)


def to_bytes(model: ir.Model) -> bytes:
    """The .lite encoding of ``model`` in memory (for small models and tests)."""
    header, payloads = _encode(model)
    out = io.BytesIO()
    data_section.write(out, header, payloads)
    return out.getvalue()


def _encode(model: ir.Model) -> tuple[bytes, list[tuple[int, np.ndarray]]]:
    encoder = _Encoder(compact=tuple(model.version) >= COMPACT_SINCE,
                       imply_scales=tuple(model.version) >= implied_scale.IMPLIED_SCALE_SINCE)
    return encoder.model(model), encoder.payloads


class _Encoder:
    def __init__(self, compact: bool, imply_scales: bool = False) -> None:
        self.builder = flatbuffers.Builder(4096)
        self.compact = compact
        self.imply_scales = imply_scales
        self.scales_implied = False  # whether a tensor's scales were left out (the file needs 2.1)
        self.buffers: list[tuple[int, int]] = [(0, 0)]  # index 0: the empty sentinel
        self.payloads: list[tuple[int, np.ndarray]] = []
        self.data_size = 0
        self.written: dict[tuple, int] = {}  # content key -> offset of a shared item (compact only)
        self.walk_cost: dict[int, int] = {}  # offset -> verifier steps to walk it (compact only)

    # -- helpers ---------------------------------------------------------------------------
    def shared(self, key: tuple, make: Callable[[], int], cost: int) -> int:
        """The offset of an item equal to ``key``, written by ``make``. Format 2.0 writes it once
        and refers to it again when its walk ``cost`` is at most :data:`SHARED_WALK_COST`;
        format 1.0 writes every item."""
        if not self.compact:
            return make()
        offset = self.written.get(key) if cost <= SHARED_WALK_COST else None
        if offset is None:
            offset = make()
            self.walk_cost[offset] = cost
            if cost <= SHARED_WALK_COST:
                self.written[key] = offset
        return offset

    def string(self, value: str | bytes) -> int:
        size = len(value.encode("utf-8") if isinstance(value, str) else value)
        return self.shared(("string", type(value), value), lambda: self.builder.CreateString(value),
                           vector_cost(size))

    def cost_of(self, offsets: list[int]) -> int:
        """The verifier's steps to walk these items (unknown items count as too many to share)."""
        return sum(self.walk_cost.get(offset, SHARED_WALK_COST + 1) for offset in offsets)

    def optional_string(self, value: str | bytes) -> int | None:
        """None for an empty string in format 2.0 (absent reads as empty)."""
        return None if self.compact and not value else self.string(value)

    def vector(self, values: Iterable, dtype: str) -> int:
        array = np.asarray(values, dtype=dtype).reshape(-1)
        return self.shared(("vector", dtype, array.tobytes()), lambda: self.builder.CreateNumpyVector(array),
                           vector_cost(array.size))

    def optional_vector(self, values: Iterable, dtype: str) -> int | None:
        """None for an empty vector in format 2.0 (absent reads as empty)."""
        array = np.asarray(values, dtype=dtype).reshape(-1)
        return None if self.compact and not array.size else self.vector(array, dtype)

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
        offset = data_section.align(self.data_size)
        self.buffers.append((offset, array.nbytes))
        self.payloads.append((offset, array))
        self.data_size = offset + array.nbytes
        return len(self.buffers) - 1

    def fields(self, builder: flatbuffers.Builder, fields: list[tuple[Callable, object]]) -> None:
        """Add a table's fields (None: absent). Format 2.0 adds the 4-byte ones (offsets, ints)
        before the 1-byte ones, so no padding falls between them."""
        if self.compact:
            fields = sorted(fields, key=lambda field: field[0] in _ONE_BYTE_FIELDS)
        for adder, value in fields:
            if value is not None:
                adder(builder, value)

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
        digest = None
        if model.weights_checksum:
            digest = self.string(data_section.weights_digest(np.reshape(array, -1).view(np.uint8) for _, array in self.payloads))
        version = tuple(model.version)
        if version == implied_scale.IMPLIED_SCALE_SINCE and not self.scales_implied:
            version = COMPACT_SINCE  # nothing of 2.1 in the file: 2.0 readers read it
        fb.ModelStart(b)
        fb.ModelAddVersionMajor(b, version[0])
        fb.ModelAddVersionMinor(b, version[1])
        fb.ModelAddGraphs(b, graphs_vec)
        fb.ModelAddOpsetImports(b, opsets_vec)
        fb.ModelAddMetadata(b, metadata_vec)
        fb.ModelAddBuffers(b, buffers_vec)
        _add(fb.ModelAddWeightsSha256, b, digest)
        b.FinishSizePrefixed(fb.ModelEnd(b), file_identifier=b"LITE")
        return bytes(b.Output())

    def graph(self, graph: ir.Graph, index: int) -> int:
        b = self.builder
        implied: dict[int, qdq.ImpliedQdq] = {}
        if self.compact:
            graph, implied = qdq.compact(graph)
        scales_implied = implied_scale.implied_scales(graph, implied) if self.imply_scales else set()
        self.scales_implied |= bool(scales_implied)
        where = f"graph {index} ({graph.name!r})"
        tensors = [self.tensor(t, where, implied.get(i, qdq.ImpliedQdq.NONE), i in scales_implied)
                   for i, t in enumerate(graph.tensors)]
        nodes = [self.node(n) for n in graph.nodes]
        name = self.optional_string(graph.name)
        tensors_vec = self.table_vector(fb.GraphStartTensorsVector, tensors)
        nodes_vec = self.table_vector(fb.GraphStartNodesVector, nodes)
        inputs = self.optional_vector(graph.inputs, "<i4")
        outputs = self.optional_vector(graph.outputs, "<i4")
        captures = self.optional_vector(graph.captures, "<i4")
        fb.GraphStart(b)
        _add(fb.GraphAddName, b, name)
        fb.GraphAddTensors(b, tensors_vec)
        fb.GraphAddNodes(b, nodes_vec)
        _add(fb.GraphAddInputs, b, inputs)
        _add(fb.GraphAddOutputs, b, outputs)
        _add(fb.GraphAddCaptures, b, captures)
        return fb.GraphEnd(b)

    def tensor(self, tensor: ir.Tensor, where: str, implied: qdq.ImpliedQdq = qdq.ImpliedQdq.NONE,
               scale_implied: bool = False) -> int:
        b = self.builder
        buffer_index = 0
        strings = None
        if tensor.data is not None:
            data = data_section.checked_data(tensor, where)
            if tensor.dtype == DataType.STRING:
                strings = self.string_vector(
                    fb.TensorStartStringDataVector,
                    [v if isinstance(v, (bytes, str)) else str(v) for v in data.reshape(-1)],
                )
            else:
                buffer_index = self.add_buffer(data)
        dims = [self.dim(dim) for dim in tensor.shape or ()]
        shape = None
        if dims or not self.compact:
            shape = self.shared(("shape", *dims), lambda: self.table_vector(fb.TensorStartShapeVector, dims),
                                self.cost_of(dims))
        quant = self.quant(tensor.quant, scale_implied) if tensor.quant is not None else None
        name = self.string(tensor.name)
        doc = self.string(tensor.doc) if tensor.doc else None
        fb.TensorStart(b)
        self.fields(b, [
            (fb.TensorAddName, name), (fb.TensorAddDtype, int(tensor.dtype)),
            (fb.TensorAddHasShape, tensor.shape is not None), (fb.TensorAddShape, shape),
            (fb.TensorAddBuffer, buffer_index), (fb.TensorAddStringData, strings),
            (fb.TensorAddIsStringConstant, True if strings is not None else None), (fb.TensorAddQuant, quant),
            (fb.TensorAddDoc, doc), (fb.TensorAddImpliedQdq, int(implied) if implied else None),
        ])
        return fb.TensorEnd(b)

    def dim(self, dim: ir.Dim) -> int:
        b = self.builder

        def make() -> int:
            param = self.string(dim) if isinstance(dim, str) else None
            fb.DimStart(b)
            if isinstance(dim, str):
                fb.DimAddParam(b, param)
            elif dim is not None:
                fb.DimAddValue(b, int(dim))
            return fb.DimEnd(b)

        cost = 1 + (vector_cost(len(dim.encode("utf-8"))) if isinstance(dim, str) else 0)
        return self.shared(("dim", type(dim), dim), make, cost)

    def quant(self, quant: ir.QuantParams, scale_implied: bool = False) -> int:
        """``scale_implied``: the reader recomputes the scales (INPUT_TIMES_WEIGHT); they are left out."""
        b = self.builder
        if quant.axis is None:
            granularity = _GRANULARITY["tensor"]
        else:
            granularity = _GRANULARITY["block" if quant.block_size else "axis"]
        # Format 2.0 leaves all-zero zero points out (symmetric weights, int32 biases).
        omit_zero_points = (self.compact and quant.zero_point.size == quant.scale.size
                            and not np.any(quant.zero_point))

        def make() -> int:
            scale = None if scale_implied else self.vector(quant.scale, "<f4")
            zero_point = None if omit_zero_points else self.vector(quant.zero_point, "<i8")
            fb.QuantParamsStart(b)
            self.fields(b, [
                (fb.QuantParamsAddGranularity, granularity), (fb.QuantParamsAddAxis, quant.axis or 0),
                (fb.QuantParamsAddBlockSize, quant.block_size), (fb.QuantParamsAddBits, quant.bits),
                (fb.QuantParamsAddSigned, quant.signed), (fb.QuantParamsAddSymmetric, quant.symmetric),
                (fb.QuantParamsAddScale, scale), (fb.QuantParamsAddZeroPoint, zero_point),
                (fb.QuantParamsAddImpliedScale,
                 int(implied_scale.ImpliedScale.INPUT_TIMES_WEIGHT) if scale_implied else None),
            ])
            return fb.QuantParamsEnd(b)

        # Implied scales are not stored: biases of any length may share one table.
        key = ("quant", granularity, quant.axis, quant.block_size, quant.bits, quant.signed, quant.symmetric,
               None if scale_implied else quant.scale.astype("<f4").tobytes(),
               None if omit_zero_points else quant.zero_point.tobytes())
        cost = (1 + (0 if scale_implied else vector_cost(quant.scale.size))
                + (0 if omit_zero_points else vector_cost(quant.zero_point.size)))
        return self.shared(key, make, cost)

    def node(self, node: ir.Node) -> int:
        b = self.builder
        attributes = [self.attribute(name, a, node) for name, a in node.attributes.items()]
        op_type = self.string(node.op_type)
        domain, name = self.optional_string(node.domain), self.optional_string(node.name)
        inputs = self.optional_vector(node.inputs, "<i4")
        outputs = self.optional_vector(node.outputs, "<i4")
        attributes_vec = None
        if attributes or not self.compact:
            attributes_vec = self.shared(("attributes", *attributes),
                                         lambda: self.table_vector(fb.NodeStartAttributesVector, attributes),
                                         self.cost_of(attributes))
        fb.NodeStart(b)
        fb.NodeAddOpType(b, op_type)
        _add(fb.NodeAddDomain, b, domain)
        _add(fb.NodeAddName, b, name)
        _add(fb.NodeAddInputs, b, inputs)
        _add(fb.NodeAddOutputs, b, outputs)
        _add(fb.NodeAddAttributes, b, attributes_vec)
        return fb.NodeEnd(b)

    def attribute(self, name: str, attribute: ir.Attribute, node: ir.Node) -> int:
        kind = ir.AttributeType(attribute.type)
        key = attribute_key(kind, attribute.value)
        if key is None:  # tensors: each has its own buffer
            return self.new_attribute(name, attribute, node)
        cost = 1 + vector_cost(len(name.encode("utf-8"))) + attribute_value_cost(kind, attribute.value)
        return self.shared(("attribute", name, kind, key), lambda: self.new_attribute(name, attribute, node), cost)

    def new_attribute(self, name: str, attribute: ir.Attribute, node: ir.Node) -> int:
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


def _add(adder: Callable[[flatbuffers.Builder, int], None], builder: flatbuffers.Builder, offset: int | None) -> None:
    """Add an optional field (absent when None)."""
    if offset is not None:
        adder(builder, offset)
