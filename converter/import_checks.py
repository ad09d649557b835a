"""Checks an imported ONNX graph must pass before any pass or the lowering sees it.

``onnx_ir`` deserializes whatever a ModelProto holds: protobuf's Python runtime hands proto2
strings that are not UTF-8 over as ``bytes``, dimensions may be negative, a name may be defined
twice, an initializer's bytes may not match its dims. The ONNX IR spec
(https://onnx.ai/onnx/repo-docs/IR.html, "Names Within a Graph", "Tensor shapes") forbids all of
these; without these checks they surfaced as a bare ``ValueError`` deep in a pass, or as a .lite
file the runtime refuses. Each failure is a :class:`ModelImportError` naming the graph, node or
value.
"""

from __future__ import annotations

import math

import onnx
import onnx.defs
import onnx_ir as ir

from converter.errors import ModelImportError

MAX_RANK = 64  # numpy's limit; ONNX sets none, no real tensor comes close


def check_model(model: ir.Model, what: str) -> None:
    """Raise :class:`ModelImportError` if ``model`` breaks the IR rules above."""
    _text(model.producer_name, "producer_name", what)
    _text(model.producer_version, "producer_version", what)
    _text(model.domain, "the model domain", what)
    _text(model.doc_string, "the model doc_string", what)
    for key, value in model.metadata_props.items():
        _text(key, "a metadata_props key", what)
        _text(value, f"metadata_props[{key!r}]", what)
    for domain, version in model.opset_imports.items():
        _text(domain, "an opset domain", what)
        if not 1 <= version < 1 << 31:
            raise ModelImportError(f"{what}: opset version {version} of domain {domain!r} is not a version number")
    _check_graph(model.graph, set(), model.opset_imports, what)
    if not model.graph.outputs:
        # ONNX Runtime refuses to run such a model ("At least one output should be requested");
        # converted, it would return nothing.
        raise ModelImportError(
            f"{what}: graph {model.graph.name!r} declares no outputs, so the model computes nothing; "
            "export it again with its outputs (the graph's output list is empty)"
        )


def sort_if_unordered(graph: ir.Graph) -> bool:
    """Sort ``graph``'s nodes (and its subgraphs') into definition order where a node reads a value
    a later node of its graph makes; return whether it did.

    ONNX stores nodes in topological order, but ONNX Runtime sorts a graph itself and runs one
    that is not, and tools write such graphs: onnxruntime's float16 converter with
    ``keep_io_types=True`` appends the Casts of the graph inputs after the nodes that read them.
    A cycle cannot be sorted; :func:`check_model` then names the value read before it is made.
    """
    if _in_definition_order(graph):
        return False
    try:
        graph.sort()
    except ValueError:
        return False
    return True


def _in_definition_order(graph: ir.Graph) -> bool:
    graphs = {id(graph): graph}
    graphs.update((id(node.graph), node.graph) for node in ir.traversal.RecursiveGraphIterator(graph)
                  if node.graph is not None)
    for each in graphs.values():
        position = {id(node): index for index, node in enumerate(each)}
        for index, node in enumerate(each):
            for value in node.inputs:
                producer = value.producer() if value is not None else None
                if producer is not None and position.get(id(producer), -1) >= index:
                    return False
    return True


def _text(value: object, where: str, what: str) -> None:
    if isinstance(value, bytes):
        raise ModelImportError(f"{what}: {where} is not valid UTF-8 text ({value[:40]!r}); the model is damaged")


def _check_graph(graph: ir.Graph, outer: set[int], opsets: dict[str, int], what: str) -> None:
    """Names, shapes and definition order of one graph; ``outer`` holds the ids of the values its
    enclosing graphs define (a subgraph may read them)."""
    _text(graph.name, "a graph name", what)
    where = f"graph {graph.name!r}"
    _text(graph.doc_string, f"{where}: the doc_string", what)
    names: dict[str, ir.Value] = {}
    available = set(outer)

    def define(value: ir.Value, role: str) -> None:
        _text(value.name, f"{where}: the name of a {role}", what)
        _text(value.doc_string, f"{where}: the doc_string of a {role}", what)
        if value.name:
            previous = names.setdefault(value.name, value)
            if previous is not value:
                raise ModelImportError(
                    f"{what}: {where}: value name {value.name!r} is defined twice (again as a {role}); "
                    "ONNX names are defined once per graph"
                )
        _check_shape(value, f"{where}: {role} {value.name!r}", what)
        available.add(id(value))

    for value in graph.inputs:
        define(value, "graph input")
    for value in graph.initializers.values():
        define(value, "initializer")
        _check_initializer_shape(value, where, what)
    for position, node in enumerate(graph):
        label = f"{where}: node {position} ({node.name or node.op_type!r})"
        _check_node(node, label, opsets, what)
        for value in node.inputs:
            if value is not None and id(value) not in available:
                raise ModelImportError(
                    f"{what}: {label} reads {value.name!r}, which no graph input, initializer or earlier "
                    "node defines (ONNX nodes are stored in topological order)"
                )
        for attribute in node.attributes.values():
            if attribute.type == ir.AttributeType.GRAPH:
                _check_graph(attribute.value, available, opsets, what)
            elif attribute.type == ir.AttributeType.GRAPHS:
                for subgraph in attribute.value:
                    _check_graph(subgraph, available, opsets, what)
        for value in node.outputs:
            define(value, f"output of node {node.name or node.op_type!r}")
    for value in graph.outputs:
        _text(value.name, f"{where}: the name of a graph output", what)
        if id(value) not in available:
            raise ModelImportError(f"{what}: {where}: graph output {value.name!r} is never defined")
        _check_shape(value, f"{where}: graph output {value.name!r}", what)


def _check_node(node: ir.Node, label: str, opsets: dict[str, int], what: str) -> None:
    """Text fields, and the input/output counts and attribute types the op's schema declares."""
    _text(node.op_type, f"{label}: the op_type", what)
    _text(node.domain, f"{label}: the domain", what)
    _text(node.name, f"{label}: the name", what)
    _text(node.doc_string, f"{label}: the doc_string", what)
    if not node.op_type:
        raise ModelImportError(f"{what}: {label} has an empty op_type")
    for name in node.attributes:
        _text(name, f"{label}: an attribute name", what)
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    version = opsets.get(domain, opsets.get("ai.onnx", 0) if domain == "" else 0)
    if domain == "" and version == 0:
        raise ModelImportError(
            f"{what}: {label} is a standard ONNX op ({node.op_type}), but the model imports no opset for "
            "the default domain (opset_import has no entry for ''); export the model again with an opset version"
        )
    try:
        schema = onnx.defs.get_schema(node.op_type, version, domain)
    except onnx.defs.SchemaError:
        return  # a custom or unknown op: the support check names it later
    inputs, outputs = len(node.inputs), len(node.outputs)
    if not schema.min_input <= inputs <= schema.max_input:
        raise ModelImportError(
            f"{what}: {label} has {inputs} inputs; {node.op_type} (opset {version}) takes "
            f"{schema.min_input} to {schema.max_input}"
        )
    if not schema.min_output <= outputs <= schema.max_output:
        raise ModelImportError(
            f"{what}: {label} has {outputs} outputs; {node.op_type} (opset {version}) has "
            f"{schema.min_output} to {schema.max_output}"
        )
    _check_control_flow(node, label, what)
    for name, attribute in node.attributes.items():
        declared = schema.attributes.get(name)
        if declared is not None and declared.type.name != attribute.type.name:
            raise ModelImportError(
                f"{what}: {label}: attribute {name!r} is {attribute.type.name}; {node.op_type} "
                f"declares it {declared.type.name}"
            )


def _check_control_flow(node: ir.Node, label: str, what: str) -> None:
    """The branch and body signatures the If and Loop pages of the ONNX spec require. ONNX's own
    shape inference does not check them: an If whose branch has no outputs makes it allocate
    until memory runs out (found by the fuzzers: a 190-byte model)."""
    if node.domain not in ("", "ai.onnx"):
        return
    if node.op_type == "If":
        for name in ("then_branch", "else_branch"):
            branch = node.attributes.get(name)
            if branch is None or branch.type != ir.AttributeType.GRAPH:
                raise ModelImportError(f"{what}: {label}: If needs a graph attribute {name!r}")
            if len(branch.value.outputs) != len(node.outputs):
                raise ModelImportError(
                    f"{what}: {label}: {name} has {len(branch.value.outputs)} outputs, the If node "
                    f"{len(node.outputs)}; each branch produces every output of the If"
                )
    elif node.op_type == "Loop":
        body = node.attributes.get("body")
        if body is None or body.type != ir.AttributeType.GRAPH:
            raise ModelImportError(f"{what}: {label}: Loop needs a graph attribute 'body'")
        carried = len(node.inputs) - 2
        inputs, outputs = len(body.value.inputs), len(body.value.outputs)
        if inputs != 2 + carried or outputs < 1 + carried or len(node.outputs) < carried:
            raise ModelImportError(
                f"{what}: {label}: the Loop body takes {inputs} inputs and gives {outputs} outputs; with "
                f"{carried} loop-carried values it takes {2 + carried} and gives at least {1 + carried}"
            )


def _check_initializer_shape(value: ir.Value, where: str, what: str) -> None:
    tensor = value.const_value
    if tensor is None or value.shape is None:
        return
    declared, actual = list(value.shape), list(tensor.shape)
    # Symbolic or unknown declared dims (an overridable initializer's input type) match any size.
    if len(declared) != len(actual) or any(isinstance(d, int) and d != a for d, a in zip(declared, actual)):
        raise ModelImportError(
            f"{what}: {where}: initializer {value.name!r} has dims {list(tensor.shape)}, but its declared "
            f"type says shape {value.shape}"
        )


def _check_shape(value: ir.Value, where: str, what: str) -> None:
    if value.shape is None:
        return
    if len(value.shape) > MAX_RANK:
        raise ModelImportError(f"{what}: {where} has rank {len(value.shape)}, more than {MAX_RANK}")
    if any(isinstance(dim, int) and dim < 0 for dim in value.shape.dims):
        if value.const_value is not None:
            raise ModelImportError(
                f"{what}: {where} has shape {value.shape} with a negative dimension; "
                "a weight's dimensions are sizes >= 0"
            )
        # -1 is how some exporters (PaddlePaddle's paddle2onnx) write "unknown size": read it so.
        value.shape = ir.Shape([None if isinstance(dim, int) and dim < 0 else dim for dim in value.shape.dims])
    if any(_unknown_by_name(dim) for dim in value.shape.dims):
        # paddle2onnx also names unknown sizes "?" (x: [-1, 3, ?, ?]); a name shared by two axes
        # would tie their sizes together, which "?" never means.
        value.shape = ir.Shape([None if _unknown_by_name(dim) else dim for dim in value.shape.dims])
    for dim in value.shape.dims:
        if isinstance(dim, ir.SymbolicDim):
            _text(dim.value, f"{where}: a dimension name", what)


def _unknown_by_name(dim: object) -> bool:
    return isinstance(dim, ir.SymbolicDim) and dim.value in ("?", "-1", "unk", "unknown")


def checked_numpy(tensor: ir.TensorProtocol) -> object:
    """``tensor.numpy()`` of an initializer or constant, after checking its type, dims and size."""
    where = f"tensor {tensor.name!r} ({tensor.dtype.name if tensor.dtype is not None else '?'}, dims {list(tensor.shape)})"
    if tensor.dtype is None or tensor.dtype == ir.DataType.UNDEFINED:
        raise ModelImportError(f"{where}: element type UNDEFINED; the model is damaged")
    dims = list(tensor.shape)
    if len(dims) > MAX_RANK or any(not isinstance(d, int) or d < 0 for d in dims):
        raise ModelImportError(f"{where}: a tensor's dims are at most {MAX_RANK} sizes >= 0; the model is damaged")
    if isinstance(tensor, ir.serde.TensorProtoTensor) and math.prod(dims) and not _holds_data(tensor.raw):
        # onnx_ir would hand back zeros of the declared dims: 4 TiB for dims [2**40].
        raise ModelImportError(f"{where}: declares {math.prod(dims):,} elements but holds no data; the model is damaged")
    try:
        array = tensor.numpy()
    # onnx_ir raises ValueError for a byte or value count that does not fit the dims, and fails an
    # assert when the values sit in a field of another type (INT64 dims with uint64_data).
    except (ValueError, AssertionError) as err:
        raise ModelImportError(f"{where}: its data does not match its type and dims ({err}); the model is damaged") from err
    if array.size != math.prod(dims):
        raise ModelImportError(f"{where}: holds {array.size} elements, its dims need {math.prod(dims)}")
    return array


_VALUE_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _holds_data(proto: onnx.TensorProto) -> bool:
    return proto.HasField("raw_data") or any(len(getattr(proto, field)) for field in _VALUE_FIELDS)


def training_mode_notes(model: ir.Model) -> list[str]:
    """Warnings for nodes left in training mode: a Dropout whose ``training_mode`` input is
    true (or not a constant) drops a random part of its input on every call. PyTorch writes one
    when the module was not put in eval mode (a wrapper whose inner model was; the TorchScript
    exporter restores training mode after it exports). The conversion keeps the node as ONNX
    defines it, so the user hears of it here rather than from outputs that change run to run."""
    nodes = []
    for graph in [model.graph, *model.graph.subgraphs()]:
        for node in graph:
            if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 3:
                continue
            flag = node.inputs[2]
            if flag is None:
                continue
            value = flag.const_value
            producer = flag.producer()
            if value is None and producer is not None and producer.op_type == "Constant":
                attribute = producer.attributes.get("value")
                value = attribute.value if attribute is not None else None
            if value is None or bool(value.numpy().reshape(-1)[:1].all()):
                nodes.append(repr(node.name) if node.name else "(unnamed)")
    if not nodes:
        return []
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    return [f"{len(nodes)} Dropout node(s) run in training mode ({shown}): their outputs are random on every "
            "call; export the model in eval mode (model.eval() before torch.onnx.export)"]
