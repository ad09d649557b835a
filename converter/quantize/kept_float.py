"""Nodes static int8 keeps in float once calibration has seen their tensors' ranges.

* A tensor no calibration sample gave a value (empty each time) has no range to quantize with.
* A Concat whose inputs' ranges differ by more than :data:`DISPARITY` times: its output shares
  one scale, so the narrow input keeps a few of the 256 steps. A detector's head concatenates
  box coordinates (0 to 640) with class scores (0 to 1): at a step of 2.5 every score was 0.
  What only moves its values on (a Pad to a fixed number of rows, a Slice, a Gather, a Reshape)
  carries the same mix, so it stays float too.
* A node that only moves values (Reshape, Transpose, MaxPool ...: its output shares its input's
  scale) whose input comes from a node kept in float: quantizing it adds a Q/DQ pair, and its
  error, where nothing reads integers. ONNX Runtime's quantizer makes the same choice: it
  quantizes such an op only where its input is quantized already.
"""

from __future__ import annotations

from converter.quantize.graph import GraphEditor

Range = tuple[float, float]
DISPARITY = 16  # an input spanning 1/16 of the output's range keeps 16 of its 256 steps


def keep_unobserved_tensors_float(graph: GraphEditor, requests, ranges: dict[str, Range], result) -> None:
    """Decline every node that would quantize a tensor no calibration sample gave a value: one
    whose size depends on the data and was empty each time (a detector's regions of interest
    on a pyramid level none of the samples used). It has no range to quantize with."""
    kept = []
    for node, request in requests:
        touched = [node.inputs[slot] for slot in request.activations]
        if request.output == "always":
            touched.append(node.outputs[0])
        unseen = next((graph.tensor(index).name for index in touched if graph.tensor(index).name not in ranges), None)
        if unseen is None:
            kept.append((node, request))
            continue
        result.declined.append((node.name, node.op_type, f"{unseen!r} held no value in any calibration sample "
                                "(empty each time), so it has no range to quantize with"))
    requests[:] = kept


def keep_disparate_concats_float(graph: GraphEditor, requests, ranges: dict[str, Range], result) -> None:
    """Decline every Concat whose output range is more than :data:`DISPARITY` times that of one
    of its inputs (see the module docstring), and every node that would quantize its output or a
    view of it (a Reshape or Transpose after it reads the same values with the same range)."""
    wide: dict[int, str] = {}  # tensor -> why it stays float
    for node, _ in requests:
        narrow = _narrow_input(graph, node, ranges) if node.op_type == "Concat" else None
        if narrow is not None:
            name, ratio = narrow
            why = (f"input {name!r} of Concat {node.name!r} spans 1/{ratio:.0f} of its output's range: one int8 "
                   f"scale would leave it {256 / ratio:.0f} of 256 steps")
            for index in _views(graph, node.outputs[0]):
                wide[index] = why
    if not wide:
        return
    kept = []
    for node, request in requests:
        touched = [node.inputs[slot] for slot in request.activations]
        if request.output in ("always", "shared"):
            touched.append(node.outputs[0])
        why = next((wide[index] for index in touched if index in wide), None)
        if why is None:
            kept.append((node, request))
        else:
            result.declined.append((node.name, node.op_type, why))
    requests[:] = kept


def keep_moves_of_float_tensors_float(graph: GraphEditor, requests, result) -> None:
    """Decline every node that only moves values (output ``shared``) whose input a node kept in
    float produces (see the module docstring). In graph order, so a chain of them goes together."""
    requested = {id(node) for node, _ in requests}
    kept = []
    for node, request in requests:
        producer = graph.producer.get(node.inputs[0]) if request.output == "shared" else None
        if producer is None or id(producer) in requested:
            kept.append((node, request))
            continue
        requested.discard(id(node))
        result.declined.append((node.name, node.op_type, f"its input comes from {producer.op_type} node "
                                f"{producer.name!r}, kept in float: a Q/DQ pair here would only add error"))
    requests[:] = kept


# Ops that move values without computing new ones: op type -> the input slots whose values their
# outputs carry (the others are shapes, indices, pads).
_MOVES = {op: (0,) for op in ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Pad",
                               "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Split",
                               "DepthToSpace", "SpaceToDepth")}
_MOVES |= {"ScatterND": (0, 2), "ScatterElements": (0, 2), "Where": (1, 2)}


def _views(graph: GraphEditor, index: int) -> list[int]:
    """``index`` and the tensors that ops moving its values carry it on to (the same values, the
    same range); a Concat carries it too, along with its other inputs."""
    found, pending = [], [index]
    while pending:
        current = pending.pop()
        if current in found:
            continue
        found.append(current)
        for reader in graph.readers(current):
            slots = range(len(reader.inputs)) if reader.op_type == "Concat" else _MOVES.get(reader.op_type, ())
            if any(slot < len(reader.inputs) and reader.inputs[slot] == current for slot in slots):
                pending += [output for output in reader.outputs if output >= 0]
    return found


def _narrow_input(graph: GraphEditor, node, ranges: dict[str, Range]) -> tuple[str, float] | None:
    spans = {}
    for index in node.inputs:
        name = graph.tensor(index).name
        if name in ranges:
            low, high = ranges[name]
            spans[name] = max(high, 0.0) - min(low, 0.0)  # the int8 range always holds 0
    widest = max(spans.values(), default=0.0)
    narrow = [(widest / span, name) for name, span in spans.items() if span > 0 and widest / span > DISPARITY]
    if not narrow:
        return None
    ratio, name = max(narrow)
    return name, ratio
