"""Reading a .lite file into :class:`lite.format.ir.Model`, verified, without copying weights.

A path is memory-mapped read-only (:mod:`lite.format.file_buffer`) and each constant becomes a
read-only ``np.frombuffer`` view of the map, so loading costs the same for a 1 MB and a 1 GB model and the pages are shared
between processes (or, with ``memory_map=False``, read once into private memory, for files that
may be rewritten in place while loaded). Everything is checked before use: the structure by
:mod:`lite.format.verifier`, then the semantics here, in :mod:`lite.format.graph_checks` and in
:mod:`lite.format.quant_params` (indices in range, sizes equal to shape ×
dtype, quantization parameters consistent with the quantized axis, one producer per tensor,
nodes in execution order, no cycles between graphs nor bodies nested or shared past a limit, opset versions that are version numbers,
fused activations the engines know with the right parameters). Any violation is a
:class:`~lite.errors.ModelFormatError` naming the graph, node or tensor.

Tensors stored with implied QDQ nodes (format 2.0, :mod:`lite.format.qdq`) are checked, then
written out as explicit QuantizeLinear/DequantizeLinear nodes: the model returned is always
explicit, and its integer weights are still views of the file. Implied bias scales (format 2.1,
:mod:`lite.format.implied_scale`) are recomputed first, so the returned parameters hold them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lite.errors import ModelFormatError
from lite.format import fused_activation, graph_checks, implied_scale, ir
from lite.format.data_section import ALIGNMENT, align, weights_digest
from lite.format.dtypes import DataType, byte_size, is_subbyte, storage_dtype
from lite.format.file_buffer import file_buffer
from lite.format.qdq import ImpliedQdq, expand, implied_problem
from lite.format.quant_params import quant_params
from lite.format.verifier import verify_flatbuffer

SUPPORTED_MAJOR = ir.FORMAT_VERSION[0]
# Larger products cannot describe a real tensor; refusing them keeps arithmetic bounded.
_MAX_ELEMENTS = 1 << 48
# ONNX opset versions are positive and fit a C int (onnx.defs.get_schema takes one).
MAX_OPSET_VERSION = (1 << 31) - 1


def load(source: str | os.PathLike | bytes | bytearray | memoryview, *, memory_map: bool = True,
         check_weights: bool = False) -> ir.Model:
    """Read and verify a .lite model from a path or from bytes.

    ``check_weights``: also compare the weights' bytes with the SHA-256 the writer stored
    (``weights_sha256``; files written before it have none and pass): a byte changed inside a
    weight (a damaged disk or copy, a file rewritten in place) is a :class:`ModelFormatError`
    instead of a model that loads and answers wrongly. It reads every weight once (about a
    second per 2 GB), so it is off by default, where a mapped file costs the same to load
    whatever its size; the server turns it on.

    A path is memory-mapped (``memory_map=True``): weights are views of the file, shared between
    processes, and the file must not be rewritten in place while the model is in use (a shorter
    file faults the process on its next read of a page past the end; a rewritten one changes the
    weights under it). Replace such files by renaming a new file over them. ``memory_map=False``
    reads the file into private memory once: the model is then independent of the file, and a
    file that changes while it is read is refused.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _Reader(memoryview(source).cast("B"), "<bytes>", check_weights).model()
    path = Path(source)
    return _Reader(memoryview(file_buffer(path, memory_map)), str(path), check_weights).model()


class _Reader:
    def __init__(self, buf: memoryview, origin: str, check_weights: bool = False) -> None:
        self.buf = buf
        self.origin = origin
        self.check_weights = check_weights
        self.buffers: list[tuple[int, int]] = []
        self.data_start = 0
        self.version = ir.FORMAT_VERSION

    def fail(self, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: {message}")

    def checked(self, check: Callable[..., None], *args: Any) -> None:
        """Run one of :mod:`lite.format.graph_checks`, its error naming this file."""
        try:
            check(*args)
        except ModelFormatError as err:
            raise self.fail(str(err)) from None

    def model(self) -> ir.Model:
        try:
            root = verify_flatbuffer(self.buf)
        except ModelFormatError as err:
            raise self.fail(str(err)) from None
        version = (root["version_major"], root["version_minor"])
        self.version = version
        if version[0] > SUPPORTED_MAJOR or version[0] == 0:
            raise self.fail(
                f"format version {version[0]}.{version[1]} is not supported: this runtime reads "
                f"major versions 1 to {SUPPORTED_MAJOR} (any minor); upgrade lite to read this file"
            )
        flatbuffer_size = int.from_bytes(self.buf[0:4], "little")
        self.data_start = align(4 + flatbuffer_size)
        self.buffers = self.read_buffers(root["buffers"] or [])
        if self.check_weights and root["weights_sha256"] is not None:
            self.compare_weights(self.text(root["weights_sha256"], "weights_sha256"))
        graph_tables = root["graphs"] or []
        if not graph_tables:
            raise self.fail("the model has no graphs (expected the main graph at index 0)")
        graphs = [self.graph(table, index, len(graph_tables)) for index, table in enumerate(graph_tables)]
        self.checked(graph_checks.check_graph_references, graphs)
        opsets: dict[str, int] = {}
        for entry in root["opset_imports"] or []:
            domain = self.text(entry["domain"], "opset_imports.domain")
            if domain in opsets:
                raise self.fail(f"opset domain {domain!r} is imported twice")
            version_number = entry["version"]
            if not 1 <= version_number <= MAX_OPSET_VERSION:
                raise self.fail(
                    f"opset version {version_number} of domain {domain or 'ai.onnx'!r} is not a version number "
                    f"(1 to {MAX_OPSET_VERSION}); the file is damaged"
                )
            opsets[domain] = version_number
        metadata: dict[str, str] = {}
        for entry in root["metadata"] or []:
            key = self.text(entry["key"], "metadata.key")
            if key in metadata:
                raise self.fail(f"metadata key {key!r} appears twice")
            metadata[key] = self.text(entry["value"], f"metadata[{key!r}]")
        return ir.Model(graphs=graphs, opset_imports=opsets, metadata=metadata, version=version,
                        weights_checksum=root["weights_sha256"] is not None)

    def compare_weights(self, expected: str) -> None:
        start = self.data_start
        found = weights_digest(self.buf[start + offset:start + offset + length] for offset, length in self.buffers[1:])
        if found != expected:
            raise self.fail(
                "the weights do not match the checksum written with the file (weights_sha256): the file "
                "was changed or damaged after it was written; write or copy it again"
            )

    # -- pieces --------------------------------------------------------------------------------
    def text(self, raw: bytes | None, where: str) -> str:
        if raw is None:
            return ""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise self.fail(f"{where} is not valid UTF-8 ({err.reason} at byte {err.start})") from None

    def read_buffers(self, tables: list[dict[str, Any]]) -> list[tuple[int, int]]:
        data_size = len(self.buf) - self.data_start
        buffers = []
        for index, table in enumerate(tables):
            offset, length = table["offset"], table["length"]
            if index == 0:
                buffers.append((0, 0))
                continue
            if offset % ALIGNMENT:
                raise self.fail(f"buffer {index} starts at data offset {offset}, not a multiple of {ALIGNMENT}")
            if offset + length > data_size:
                raise self.fail(
                    f"buffer {index} (offset {offset}, {length} bytes) extends past the end of the file's "
                    f"{max(data_size, 0)}-byte data section (truncated file?)"
                )
            buffers.append((offset, length))
        return buffers

    def graph(self, table: dict[str, Any], index: int, graph_count: int) -> ir.Graph:
        name = self.text(table["name"], f"graph {index} name")
        where = f"graph {index} ({name!r})"
        tensor_tables = table["tensors"] or []
        tensors = [self.tensor(t, f"{where} tensor {i}") for i, t in enumerate(tensor_tables)]
        implied = {i: ImpliedQdq(t["implied_qdq"]) for i, t in enumerate(tensor_tables) if t["implied_qdq"]}
        scales_implied = [i for i, t in enumerate(tensor_tables)
                          if t["quant"] is not None and t["quant"]["implied_scale"]]
        count = len(tensors)
        names = set()
        for position, tensor in enumerate(tensors):
            if tensor.name in names:
                raise self.fail(f"{where}: tensor name {tensor.name!r} is used twice (tensor {position})")
            names.add(tensor.name)
        nodes = [self.node(n, f"{where} node {i}", count, graph_count) for i, n in enumerate(table["nodes"] or [])]
        inputs = self.indices(table["inputs"], count, f"{where} inputs")
        outputs = self.indices(table["outputs"], count, f"{where} outputs")
        captures = self.indices(table["captures"], count, f"{where} captures")
        graph = ir.Graph(name=name, tensors=tensors, nodes=nodes, inputs=inputs, outputs=outputs, captures=captures)
        self.checked(graph_checks.check_dataflow, graph, where)
        self.recompute_scales(graph, tensor_tables, scales_implied, implied, where)
        if not implied:
            return graph
        self.checked(graph_checks.check_implied, graph, implied, where)
        try:
            return expand(graph, implied)
        except ModelFormatError as err:
            raise self.fail(str(err)) from None

    def indices(self, values: np.ndarray | None, count: int, where: str, allow_omitted: bool = False) -> list[int]:
        if values is None:
            return []
        result = values.tolist()
        low = -1 if allow_omitted else 0
        for position, value in enumerate(result):
            if not low <= value < count:
                raise self.fail(f"{where}[{position}] = {value} is not a tensor index (graph has {count} tensors)")
        return result

    def tensor(self, table: dict[str, Any], where: str, in_graph: bool = True) -> ir.Tensor:
        name = self.text(table["name"], f"{where} name")
        where = f"{where} ({name!r})"
        dtype = DataType(table["dtype"])
        shape = None
        if table["has_shape"]:
            shape = tuple(self.dim(d, f"{where} shape[{i}]") for i, d in enumerate(table["shape"] or []))
        data = None
        buffer_index = table["buffer"]
        if table["is_string_constant"]:
            data = self.string_constant(table, dtype, shape, where)
        elif buffer_index:
            data = self.constant(buffer_index, dtype, shape, where)
        scale_implied = table["quant"] is not None and table["quant"]["implied_scale"]
        if scale_implied:
            self.check_implied_scale(table, in_graph, where)
        quant = self.quant(table["quant"], shape, where) if table["quant"] is not None and not scale_implied else None
        tensor = ir.Tensor(name=name, dtype=dtype, shape=shape, data=data, quant=quant,
                           doc=self.text(table["doc"], f"{where} doc"))
        implied = ImpliedQdq(table["implied_qdq"])
        if implied:
            if not in_graph:
                raise self.fail(f"{where}: implied QDQ nodes ({implied.name}) on a tensor attribute; "
                                "only graph tensors imply nodes")
            if self.version < (2, 0):
                raise self.fail(f"{where}: implied QDQ nodes ({implied.name}) need format 2.0, the file says "
                                f"{self.version[0]}.{self.version[1]}")
            problem = implied_problem(tensor, implied) if not scale_implied else None  # else once recomputed
            if problem is not None:
                raise self.fail(f"{where}: {implied.name} {problem}")
        return tensor

    def check_implied_scale(self, table: dict[str, Any], in_graph: bool, where: str) -> None:
        """What a tensor whose scales are implied must be before they are recomputed."""
        kind = implied_scale.ImpliedScale(table["quant"]["implied_scale"])
        label = f"{where} quantization: implied scales ({kind.name})"
        if not in_graph:
            raise self.fail(f"{label} on a tensor attribute; only a graph's bias tensors imply scales")
        if self.version < implied_scale.IMPLIED_SCALE_SINCE:
            raise self.fail(f"{label} need format 2.1, the file says {self.version[0]}.{self.version[1]}")
        if table["quant"]["scale"] is not None:
            raise self.fail(f"{label} but the scales are stored too; store one or the other")
        if table["implied_qdq"] != ImpliedQdq.DEQUANTIZE:
            raise self.fail(f"{label} need implied_qdq DEQUANTIZE (an int32 bias constant)")

    def recompute_scales(self, graph: ir.Graph, tables: list[dict[str, Any]], indices: list[int],
                         implied: dict[int, ImpliedQdq], where: str) -> None:
        """Give the tensors at ``indices`` their implied scales, then check them as stored ones."""
        if not indices:
            return
        reads = implied_scale.reads_of(graph)
        for index in indices:
            tensor = graph.tensors[index]
            label = f"{where} tensor {index} ({tensor.name!r})"
            scale = implied_scale.bias_scale(graph, index, implied, reads)
            if isinstance(scale, str):
                raise self.fail(f"{label}: its scales are implied (INPUT_TIMES_WEIGHT) but it {scale}")
            tensor.quant = self.quant(tables[index]["quant"], tensor.shape, label, scale)
            problem = implied_problem(tensor, implied[index])
            if problem is not None:
                raise self.fail(f"{label}: {implied[index].name} {problem}")

    def dim(self, table: dict[str, Any], where: str) -> ir.Dim:
        if table["param"] is not None:
            return self.text(table["param"], where)
        value = table["value"]
        if value < -1:
            raise self.fail(f"{where} = {value}: a dimension is >= 0, or -1 for unknown")
        return None if value == -1 else value

    def element_count(self, shape: tuple[ir.Dim, ...] | None, where: str) -> int:
        if shape is None or any(not isinstance(d, int) for d in shape):
            raise self.fail(f"{where}: a constant needs a fixed shape, got {shape}")
        count = 1
        for dim in shape:
            count *= dim
            if count > _MAX_ELEMENTS:
                raise self.fail(f"{where}: shape {shape} has more than 2**48 elements")
        return count

    def constant(self, buffer_index: int, dtype: DataType, shape, where: str) -> np.ndarray:
        if buffer_index >= len(self.buffers):
            raise self.fail(f"{where}: buffer index {buffer_index} out of range ({len(self.buffers)} buffers)")
        if dtype in (DataType.UNDEFINED, DataType.STRING):
            raise self.fail(f"{where}: a {dtype.name} tensor cannot refer to a data buffer")
        count = self.element_count(shape, where)
        offset, length = self.buffers[buffer_index]
        expected = byte_size(dtype, count)
        if length != expected:
            raise self.fail(
                f"{where}: buffer {buffer_index} holds {length} bytes, but {dtype.name} x {shape} needs {expected}"
            )
        start = self.data_start + offset
        if is_subbyte(dtype):
            return np.frombuffer(self.buf, dtype=np.uint8, count=length, offset=start)
        storage = storage_dtype(dtype).newbyteorder("<")
        if count == 0:
            return np.empty(shape, dtype=storage)
        return np.frombuffer(self.buf, dtype=storage, count=count, offset=start).reshape(shape)

    def string_constant(self, table: dict[str, Any], dtype: DataType, shape, where: str) -> np.ndarray:
        if dtype != DataType.STRING:
            raise self.fail(f"{where}: string data on a {dtype.name} tensor")
        count = self.element_count(shape, where)
        strings = table["string_data"] or []
        if len(strings) != count:
            raise self.fail(f"{where}: {len(strings)} strings for shape {shape} ({count} elements)")
        array = np.empty(count, dtype=object)
        array[:] = strings
        return array.reshape(shape)

    def quant(self, table: dict[str, Any], shape, where: str, implied: np.ndarray | None = None) -> ir.QuantParams:
        """``implied``: the recomputed scales of a table whose scales are implied."""
        try:
            return quant_params(table, shape, where, implied)
        except ModelFormatError as err:
            raise self.fail(str(err)) from None

    def node(self, table: dict[str, Any], where: str, tensor_count: int, graph_count: int) -> ir.Node:
        op_type = self.text(table["op_type"], f"{where} op_type")
        name = self.text(table["name"], f"{where} name")
        where = f"{where} ({name or op_type!r})"
        if not op_type:
            raise self.fail(f"{where}: op_type is empty")
        attributes: dict[str, ir.Attribute] = {}
        for position, attribute in enumerate(table["attributes"] or []):
            attribute_name = self.text(attribute["name"], f"{where} attribute {position} name")
            if attribute_name in attributes:
                raise self.fail(f"{where}: attribute {attribute_name!r} appears twice")
            attributes[attribute_name] = self.attribute(attribute, f"{where} attribute {attribute_name!r}", graph_count)
        if fused_activation.ATTRIBUTE in attributes or fused_activation.PARAMS_ATTRIBUTE in attributes:
            self.checked(graph_checks.check_fused_activation, attributes, where)
        return ir.Node(
            op_type=op_type,
            domain=self.text(table["domain"], f"{where} domain"),
            name=name,
            inputs=self.indices(table["inputs"], tensor_count, f"{where} inputs", allow_omitted=True),
            outputs=self.indices(table["outputs"], tensor_count, f"{where} outputs", allow_omitted=True),
            attributes=attributes,
        )

    def attribute(self, table: dict[str, Any], where: str, graph_count: int) -> ir.Attribute:
        kind = ir.AttributeType(table["type"])
        T = ir.AttributeType

        def graph_index(value: int) -> int:
            if not 1 <= value < graph_count:
                raise self.fail(f"{where}: graph index {value} is not a subgraph (model has {graph_count} graphs)")
            return value

        if kind == T.FLOAT:
            value: Any = table["f"]
        elif kind == T.INT:
            value = table["i"]
        elif kind == T.STRING:
            value = table["s"] or b""
        elif kind == T.TENSOR:
            if table["t"] is None:
                raise self.fail(f"{where}: TENSOR attribute without a tensor")
            value = self.tensor(table["t"], where, in_graph=False)
        elif kind == T.GRAPH:
            value = graph_index(table["g"])
        elif kind == T.FLOATS:
            value = [] if table["floats"] is None else table["floats"].tolist()
        elif kind == T.INTS:
            value = [] if table["ints"] is None else table["ints"].tolist()
        elif kind == T.STRINGS:
            value = list(table["strings"] or [])
        elif kind == T.TENSORS:
            value = [self.tensor(t, f"{where}[{i}]", in_graph=False) for i, t in enumerate(table["tensors"] or [])]
        elif kind == T.GRAPHS:
            value = [graph_index(g) for g in ([] if table["graphs"] is None else table["graphs"].tolist())]
        else:
            raise self.fail(f"{where}: attribute type is UNDEFINED")
        return ir.Attribute(kind, value)
