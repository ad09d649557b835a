"""Nodes static int8 keeps in float once calibration has seen their tensors' ranges.

* A tensor no calibration sample gave a value (empty each time) has no range to quantize with.
* A Concat whose inputs' ranges differ by more than :data:`DISPARITY` times: its output shares
  one scale, so the narrow input keeps a few of the 256 steps. A detector's head concatenates
  box coordinates (0 to 640) with class scores (0 to 1): at a step of 2.5 every score was 0.
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


_VIEWS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def _views(graph: GraphEditor, index: int) -> list[int]:
    """``index`` and the tensors views of it carry on (the same values, the same range)."""
    found, pending = [], [index]
    while pending:
        current = pending.pop()
        found.append(current)
        pending += [reader.outputs[0] for reader in graph.readers(current)
                    if reader.op_type in _VIEWS and reader.inputs and reader.inputs[0] == current]
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
