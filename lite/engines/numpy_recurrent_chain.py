"""The numpy engine's forward LSTM layers with peepholes, each reading the last one's output, run
as one wavefront loop::

    x ─► LSTM ─► Squeeze ─► Unsqueeze ─► LSTM ─► Squeeze ─► Unsqueeze ─► LSTM ─► ...

    becomes    x ─► the three layers in one loop (lite.ops._rnn_rows.lstm_peepholes_chain_loop) ─► ...

madmom's unidirectional beat tracker is three such layers. A step of a layer is a dozen numpy
calls on vectors of 25 values, whose cost is the calls: iteration s of the one loop runs layer
k's step s - k for every k at once, K layers of T steps in T + K - 1 iterations of the same
calls instead of K * T (the layers' outputs are their nodes', up to the order of float32 sums).

A link is an LSTM node of the default cell with peepholes (weights prepared at load), forward,
layout 0, whose output Y alone feeds the next one's X through Squeeze, Unsqueeze, Reshape,
or Flatten nodes (they keep the order of the elements; no other reader, no graph
output); the next node's other inputs must not be computed from the chain's outputs. A call
with a batch other than 1, sequence lengths, a Y that the reshapes do not make the next X
``(T, 1, H)``, weights that do not fit, or layers too large for the row loops runs the nodes
one by one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import Graph
from lite.engines.numpy_recurrent_stack import in_place_of
from lite.engines.numpy_steps import _failure
from lite.errors import LiteError

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

_RESHAPES = {"Squeeze", "Unsqueeze", "Reshape", "Flatten"}
_RESHAPE_MODULES = {"lite.ops.squeeze", "lite.ops.reshape"}


def chain_recurrences(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each chain of two or more links (see the module docstring) as one step."""
    while True:
        graph = Graph(steps, graph_outputs)
        block = next((found for step in steps if (found := _chain_from(step, graph, steps)) is not None), None)
        if block is None:
            return steps
        members = [step for step in block if step.node.op_type == "LSTM"]
        produced = {index for step in block for index in step.outputs}
        inputs = [index for step in block for index in step.inputs if index not in produced]
        fused = replace(
            members[0], fn=ChainedRecurrence(block, members, inputs, constants), inputs=inputs,
            outputs=[index for step in members for index in step.outputs], attributes={}, output_count=None,
            wants_allocate=False, prepare=None, prepared=None, memo=None, memo_sources=[])
        steps = in_place_of(steps, block, fused)


def _link(step: _Step) -> bool:
    """An LSTM node of the default cell with peepholes prepared, forward, layout 0."""
    if step.node.op_type != "LSTM" or step.node.domain or step.custom or step.graph_attributes:
        return False
    if getattr(step.fn, "__module__", None) != "lite.ops.lstm" or step.activation is not None or step.memo:
        return False
    from lite.ops._rnn_default_cells import CellWeights

    weights, keywords = step.prepared, step.keywords
    return (type(weights) is CellWeights and weights.peepholes is not None and weights.r_t.shape[0] == 1
            and keywords.get("direction", "forward") == "forward" and not keywords.get("layout", 0))


def _chain_from(first: _Step, graph: Graph, steps: list[_Step]) -> list[_Step] | None:
    """``first`` and what follows it in a chain of two or more links, or None. ``first`` must
    not itself follow a link (the chain is found from its start)."""
    if not _link(first) or _previous_link(first, graph) is not None:
        return None
    block, step = [first], first
    while True:
        found = _next_link(step, graph)
        if found is None:
            break
        reshapes, following = found
        if _reads_derived(following, block + reshapes, steps, graph):
            break
        block += [*reshapes, following]
        step = following
    return block if len(block) > 1 else None


def _next_link(step: _Step, graph: Graph) -> tuple[list[_Step], _Step] | None:
    """The reshapes from ``step``'s Y to the X of the link alone reading them, and that link."""
    value, reshapes = step.outputs[0], []
    hidden, dtype = step.prepared.r_t.shape[1], step.prepared.dtype
    while graph.single(value):
        (reader,) = graph.readers_of[value]
        if reader.node.op_type in _RESHAPES and _plain_reshape(reader, value):
            reshapes.append(reader)
            value = reader.outputs[0]
            continue
        if (_link(reader) and reader.inputs[0] == value and reader.inputs.count(value) == 1
                and reader.prepared.r_t.shape[1] == hidden and reader.prepared.dtype == dtype
                and reader.prepared.w_t.shape[0] == hidden):
            return reshapes, reader
        return None
    return None


def _previous_link(step: _Step, graph: Graph) -> _Step | None:
    value = step.inputs[0]
    while value >= 0 and value in graph.producer_of:
        producer = graph.producer_of[value]
        if _link(producer):
            found = _next_link(producer, graph)
            return producer if found is not None and found[1] is step else None
        if producer.node.op_type not in _RESHAPES or not _plain_reshape(producer, producer.inputs[0]):
            return None
        value = producer.inputs[0]
    return None


def _plain_reshape(step: _Step, value: int) -> bool:
    return (not step.node.domain and not step.custom and step.activation is None and step.memo is None
            and not step.graph_attributes and len(step.outputs) == 1 and step.inputs[:1] == [value]
            and value not in step.inputs[1:] and getattr(step.fn, "__module__", None) in _RESHAPE_MODULES)


def _reads_derived(step: _Step, block: list[_Step], steps: list[_Step], graph: Graph) -> bool:
    """Whether ``step`` reads, besides its X, a value computed from the block's outputs (an
    initial state from the last layer's final one, say): known only once the block has run."""
    derived = {index for each in block for index in each.outputs if index >= 0}
    for each in steps[graph.position[id(block[0])] + 1 : graph.position[id(step)]]:
        if any(index in derived for index in each.inputs):
            derived.update(index for index in each.outputs if index >= 0)
    return any(index in derived for index in step.inputs[1:])


class ChainedRecurrence:
    """The fused step's kernel: the links' outputs, one link's after the other's."""

    names_its_node = True  # what it raises names the node (the failing one where it runs them in turn)

    def __init__(self, block: list[_Step], members: list[_Step], inputs: list[int],
                 constants: dict[int, Any]) -> None:
        from lite.ops import _rnn_common, _rnn_default_cells, _rnn_rows

        self.common, self.cells, self.rows = _rnn_common, _rnn_default_cells, _rnn_rows
        self.block, self.members, self.inputs, self.constants = block, members, inputs, constants

    def __call__(self, *args: Any) -> tuple:
        values = dict(zip(self.inputs, args))
        values[-1] = None
        layers = self._layers(values)
        if layers is None:
            return self._in_turn(values)
        try:
            outputs = self.rows.lstm_peepholes_chain_loop(layers)
        except Exception as err:
            raise _failure(self.members[0], list(args), err) from err
        return tuple(value for step, own in zip(self.members, outputs) for value in own[: len(step.outputs)])

    def _value(self, values: dict[int, Any], index: int) -> Any:
        return values[index] if index in values else self.constants.get(index)

    def _layers(self, values: dict[int, Any]) -> list[Any] | None:
        """Each link's inputs in layout 0 with its prepared weights (past the first, X a stand-in
        of the shape the reshapes give), or None where the loop does not apply to this call."""
        layers, shape = [], None
        for step in self.members:
            args = [self._value(values, index) for index in step.inputs] + [None] * (8 - len(step.inputs))
            if shape is not None:
                args[0] = np.empty(shape, layers[0].inputs.dtype)
            weights = step.keywords["prepared"]
            try:
                inputs = self.common.time_major("LSTM", args[0], args[4], args[5:7], "forward", 0,
                                                weights.r_t.shape[1])
            except (LiteError, ValueError, TypeError):
                return None
            if (inputs.X.shape[1] != 1 or inputs.masks is not None or not self.cells.usable(weights, args[3],
                                                                                          inputs.dtype, args[7])
                    or (layers and inputs.dtype != layers[0].inputs.dtype)):
                return None
            layers.append(self.cells.Layer(inputs, weights))
            shape = self._next_x_shape(step, inputs, values)
            if shape is None:
                return None
        first = layers[0].inputs
        return layers if self.rows.fits_chain_loop(len(layers), first.hidden, first.dtype) else None

    def _next_x_shape(self, step: _Step, inputs: Any, values: dict[int, Any]) -> tuple[int, ...] | None:
        """The shape of the next link's X, (T, 1, H), from this link's Y through the reshapes
        (run on an empty stand-in: views, no data); the last link's: any. None where the
        reshapes give another shape or refuse."""
        position = next(p for p, each in enumerate(self.block) if each is step)
        seq_length, hidden = inputs.X.shape[0], inputs.hidden
        value = np.empty((seq_length, 1, 1, hidden), inputs.dtype)
        for reshape in self.block[position + 1 :]:
            if reshape.node.op_type == "LSTM":
                return value.shape if value.shape == (seq_length, 1, hidden) else None
            args = [value, *(self._value(values, index) for index in reshape.inputs[1:])]
            try:
                value = reshape.fn(*args, **reshape.keywords)
            except (LiteError, ValueError, TypeError):
                return None
        return ()

    def _in_turn(self, values: dict[int, Any]) -> tuple:
        """The block's own kernels one after the other, a failure named after its node."""
        for step in self.block:
            args = [self._value(values, index) for index in step.inputs]
            try:
                result = step.fn(*args, **step.keywords)
            except Exception as err:
                raise _failure(step, args, err) from err
            values.update(zip(step.outputs, result if type(result) is tuple else (result,)))
        return tuple(values.get(index) for step in self.members for index in step.outputs)
