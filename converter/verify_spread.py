"""How far the reference moves by itself: the noise no conversion can be asked to beat.

Two measurements, per output, on the inputs the check runs on; the larger one widens the
tolerance (:class:`lite.compare.Tolerance`, ``spread`` times ``spread_factor``):

- **ONNX Runtime's optimization levels**: the original with its graph optimizations on and off.
  Fused kernels and other blockings sum in another order, as a converted model does; a float
  network moves by about as much as its conversion does (a random-weight LeViT by 5%).
- **A tiny input nudge**, for models whose activations are quantized (QuantizeLinear,
  DynamicQuantizeLinear, QLinear*, MatMulInteger, ConvInteger and ONNX Runtime's quantized
  contrib ops): the original on its float inputs times ``1 + 1e-6 * s``, ``s`` a random sign per
  element, for :data:`NUDGE_PATTERNS` fixed patterns. A float summed in another order can round a
  quantized activation to the next integer; that one flip moves the output by a quantization
  step times the gain downstream, a discrete jump the conversion may or may not hit, and the
  optimization levels may or may not hit either (the int8 kernels they fuse often compute the
  same rounding). A nudge of a few float32 ulps is such a change of rounding; each pattern flips
  a few other activations, so the largest movement over the patterns samples how far one flip
  moves this model on these inputs. On pipecat's smart-turn (an int8 Whisper encoder) one
  pattern moves the output probability by 0, the next by 0.14, on the same input.

Models that pick by comparison from computed values (ArgMax, ArgMin, TopK) get the nudge too: a
near tie flips as a quantized activation does (Keypoint R-CNN's keypoints, the maxima of heatmaps,
moved by a heatmap cell, 4.9 pixels, between ONNX Runtime and the numpy engine while ONNX Runtime's
levels agreed). Other float models get no nudge: their float noise is continuous and the
optimization levels measure it already; the runs would add time (one inference each), and a wider
tolerance hides more.

An output that any of these runs holds as the same rows in another order is measured by the rows it
leaves unpaired, never element by element (:class:`Movement`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import onnx

from lite.compare import Tolerance, spread_of, unordered_outputs

NUDGE = 1e-6  # relative: 8 float32 ulps, far below any change of the input that means something
NUDGE_PATTERNS = 8  # one pattern often flips nothing (moves by 0): a few of them sample the flips
_NUDGE_SEED = 0

LEVELS = "with and without ONNX Runtime's optimizations"
NUDGED = f"under a {NUDGE:g} relative nudge of its inputs (largest of {NUDGE_PATTERNS} random sign patterns)"

# Ops that round a float activation to an integer grid (ONNX and com.microsoft domains);
# QLinear* ops are matched by prefix.
_QUANTIZING_OPS = {
    "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QGemm", "QAttention",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM", "QOrderedMatMul",
}

_SELECTING_OPS = {"ArgMax", "ArgMin", "TopK"}

Run = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def selects_discretely(proto: onnx.ModelProto) -> bool:
    """Whether the main graph picks by comparison from computed values (ArgMax, ArgMin, TopK): a
    float summed in another order flips a near tie as it flips a quantized activation (Keypoint
    R-CNN's keypoints are the maxima of heatmaps: one flip moves a keypoint by a heatmap cell)."""
    constants = {init.name for init in proto.graph.initializer}
    return any(node.op_type in _SELECTING_OPS and node.input and node.input[0] not in constants
               for node in proto.graph.node)


def quantizes_activations(proto: onnx.ModelProto) -> bool:
    """Whether a node of the model (subgraphs included) rounds a computed float tensor, not
    only a weight, to integers: only then do tiny float differences flip values."""
    return _graph_quantizes_activations(proto.graph, set())


def _graph_quantizes_activations(graph: onnx.GraphProto, outer_constants: set[str]) -> bool:
    constants = outer_constants | {init.name for init in graph.initializer}
    constants |= {output for node in graph.node if node.op_type == "Constant" for output in node.output}
    for node in graph.node:
        quantizing = node.op_type in _QUANTIZING_OPS or node.op_type.startswith("QLinear")
        if quantizing and node.input and node.input[0] not in constants:
            return True
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs):
                if _graph_quantizes_activations(subgraph, constants):
                    return True
    return False


def nudged(feeds: Mapping[str, np.ndarray], patterns: int = NUDGE_PATTERNS,
           seed: int = _NUDGE_SEED) -> Iterator[dict[str, np.ndarray]]:
    """``feeds`` with each float input times ``1 + NUDGE * sign``, one random sign per element,
    ``patterns`` times; other inputs unchanged. Nothing if no input is float."""
    rng = np.random.default_rng(seed)
    floats = [name for name, value in feeds.items() if np.asarray(value).dtype.kind == "f"]
    if not floats:
        return
    for _ in range(patterns):
        pattern = dict(feeds)
        for name in floats:
            value = np.asarray(feeds[name])
            sign = rng.choice(np.array([-1.0, 1.0]), size=value.shape)
            pattern[name] = (value * (1.0 + NUDGE * sign)).astype(value.dtype)
        yield pattern


class Movement:
    """How far other runs of the reference move from ``expected``, per output: element by element,
    and, for outputs a run holds as the same rows in another order (near-tied scores through a TopK
    or NMS), as the number of rows left unpaired (:func:`lite.compare.unordered_outputs`). An output
    any run reorders is measured by rows alone: element by element its movement is the whole range
    of its values, which would excuse any error."""

    def __init__(self, expected: Mapping[str, np.ndarray], tolerance: Tolerance) -> None:
        self.expected, self.tolerance = expected, tolerance
        self.elementwise: dict[str, dict[str, float]] = {}  # source -> output -> movement
        self.rows: dict[str, dict[str, float]] = {}  # source -> output -> rows unpaired

    def add(self, source: str, moved: Mapping[str, np.ndarray]) -> None:
        elementwise, rows = self.elementwise.setdefault(source, {}), self.rows.setdefault(source, {})
        for name, value in spread_of(self.expected, moved).items():
            elementwise[name] = max(elementwise.get(name, 0.0), value)
        for name, value in unordered_outputs(self.expected, moved, self.tolerance).items():
            rows[name] = max(rows.get(name, 0.0), value)

    def reordered(self) -> frozenset[str]:
        return frozenset(name for rows in self.rows.values() for name in rows)

    def measured(self) -> dict[str, dict[str, float]]:
        """Per source, per output: the rows unpaired for a reordered output, else the movement."""
        reordered = self.reordered()
        return {source: {**{name: value for name, value in self.elementwise[source].items() if name not in reordered},
                         **self.rows[source]}
                for source in self.elementwise}


def add_nudges(movement: Movement, run: Run, feeds: Mapping[str, np.ndarray]) -> None:
    """The reference's movement under :func:`nudged` inputs, into ``movement``."""
    for pattern in nudged(feeds):
        movement.add(NUDGED, run(pattern))


def combined(measured: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, str]]:
    """Per output, the largest spread over the measurements (keyed by what they were, e.g.
    :data:`LEVELS`), and which measurement gave it."""
    spread: dict[str, float] = {}
    source: dict[str, str] = {}
    for what, spreads in measured.items():
        for name, value in spreads.items():
            if name not in spread or value > spread[name]:
                spread[name], source[name] = value, what
    return spread, source
