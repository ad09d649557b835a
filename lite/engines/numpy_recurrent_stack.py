"""The numpy engine's independent recurrent nodes of one cell run as one time loop::

    x ─► LSTM(forward) ─► Squeeze ─────────────────────────┐
    └──► Slice(reversed) ─► LSTM(forward) ─► Squeeze ─► Slice(reversed) ─► Concat ─► ...

    becomes    x, x reversed ─► LSTM + LSTM (one loop, both stacked as directions) ─► the same outputs

madmom writes each bidirectional layer so: two forward nodes, the second on the input reversed in
time, instead of one bidirectional node. Neither reads the other's outputs, so their steps can run
side by side, as a bidirectional node's two directions do (:class:`lite.ops._rnn_stack.Stack`):
a step of a layer is a few dozen numpy calls on vectors of a few dozen values, whose cost is
the calls, and one loop over both makes the same calls once per step instead of twice.

A group is any set of default-cell nodes (weights prepared at load) of one op and cell kind and
one hidden size, none reading what another computes. Each keeps its own weights, input
projection, states and sequence lengths, and gets the values its kernel gives (the same
arithmetic, per direction). The fused step stands where the group's last node stood; the steps
between that read a member's outputs move after it. A call whose nodes disagree in sequence
length, batch or dtype, or that a prepared weight does not fit, runs the nodes' own kernels.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lite.engines.numpy_steps import _failure
from lite.errors import LiteError

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

# Op type -> (the lite.ops module of its kernels, its state inputs after sequence_lens).
_RECURRENT = {"LSTM": ("lstm", 2), "GRU": ("gru", 1), "RNN": ("rnn", 1)}
_INPUTS = {"LSTM": 8, "GRU": 6, "RNN": 6}


def stack_recurrences(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each group of independent recurrent nodes (see the module docstring) as one step."""
    while True:
        group = _next_group(steps)
        if group is None:
            return steps
        steps = _with_group_fused(steps, group)


def _key(step: _Step) -> tuple | None:
    """What nodes of one group share (op, hidden size, dtype and cell kind), or None where a
    node is no candidate: not a default cell with prepared weights, or not plain."""
    op = step.node.op_type
    if op not in _RECURRENT or step.node.domain or step.custom or step.graph_attributes:
        return None
    if getattr(step.fn, "__module__", None) != f"lite.ops.{_RECURRENT[op][0]}" or step.activation is not None:
        return None
    from lite.ops._rnn_default_cells import CellWeights

    weights = step.prepared
    if type(weights) is not CellWeights or step.memo is not None:
        return None
    return (op, weights.r_t.shape[1], weights.dtype, weights.peepholes is None, weights.recurrent_bias is None,
            weights.r_h_t is None)


def _next_group(steps: list[_Step]) -> list[_Step] | None:
    """The first node with later nodes it can run with, and those (in order), or None."""
    for position, first in enumerate(steps):
        key = _key(first)
        if key is None:
            continue
        group = [first]
        derived = {index for index in first.outputs if index >= 0}  # computed from a member's outputs
        for step in steps[position + 1:]:
            reads_group = any(index in derived for index in step.inputs)
            if not reads_group and _key(step) == key:
                group.append(step)
            elif not (reads_group or step.graph_attributes):  # a body may read a member's output by name
                continue
            derived.update(index for index in step.outputs if index >= 0)
        if len(group) > 1:
            return group
    return None


def _with_group_fused(steps: list[_Step], group: list[_Step]) -> list[_Step]:
    fused = replace(
        group[0], fn=StackedRecurrence(group), inputs=[i for step in group for i in step.inputs],
        outputs=[i for step in group for i in step.outputs], attributes={}, output_count=None,
        wants_allocate=False, prepare=None, prepared=None, memo=None, memo_sources=[])
    return in_place_of(steps, group, fused)


def in_place_of(steps: list[_Step], block: list[_Step], fused: _Step) -> list[_Step]:
    """``steps`` with ``block`` (in order) replaced by ``fused`` where its last step stood: the
    steps between that are computed from the block's outputs move after it, the others stay
    before (the block's own inputs among them)."""
    members = {id(step) for step in block}
    first, last = (next(p for p, step in enumerate(steps) if id(step) == id(block[k])) for k in (0, -1))
    derived = {index for step in block for index in step.outputs if index >= 0}
    before, after = [], []
    for step in steps[first + 1 : last]:
        if id(step) in members:
            continue
        if any(index in derived for index in step.inputs) or step.graph_attributes:
            derived.update(index for index in step.outputs if index >= 0)
            after.append(step)
        else:
            before.append(step)
    return steps[:first] + before + [fused] + after + steps[last + 1 :]


class StackedRecurrence:
    """The fused step's kernel: its nodes' outputs, one node's after the other's."""

    names_its_node = True  # what it raises names the node (the failing member where it runs them in turn)

    def __init__(self, group: list[_Step]) -> None:
        from lite.ops import _rnn_common, _rnn_default_cells

        self.common, self.cells = _rnn_common, _rnn_default_cells
        self.op = group[0].node.op_type
        self.group = group

    def __call__(self, *args: Any) -> tuple:
        per_node, start = [], 0
        for step in self.group:
            per_node.append(list(args[start : start + len(step.inputs)]))
            start += len(step.inputs)
        layers = [self._layer(step, values) for step, values in zip(self.group, per_node)]
        if any(layer is None for layer in layers) or not self._alike(layers):
            return self._in_turn(per_node)
        try:
            outputs = self.cells.run_stacked(self.op, layers)
        except Exception as err:
            raise _failure(self.group[0], list(args), err) from err
        return self._declared(outputs)

    def _layer(self, step: _Step, values: list[Any]) -> Any:
        """The node's inputs in layout 0 with its prepared weights, or None where those do not fit
        this call or the inputs are refused (the node's kernel then says why)."""
        values = values + [None] * (_INPUTS[self.op] - len(values))
        X, W, R, B, sequence_lens = values[:5]
        states = values[5 : 5 + _RECURRENT[self.op][1]]
        peepholes = values[7] if self.op == "LSTM" else None
        keywords = step.keywords
        weights = keywords["prepared"]
        hidden = int(keywords["hidden_size"]) if keywords.get("hidden_size") else weights.r_t.shape[1]
        try:
            inputs = self.common.time_major(self.op, X, sequence_lens, states, keywords.get("direction", "forward"),
                                            keywords.get("layout", 0), hidden)
        except (LiteError, ValueError, TypeError):
            return None
        if not self.cells.usable(weights, B, inputs.dtype, peepholes):
            return None
        return self.cells.Layer(inputs, weights)

    @staticmethod
    def _alike(layers: list[Any]) -> bool:
        first = layers[0].inputs
        return all(layer.inputs.X.shape[:2] == first.X.shape[:2] and layer.inputs.dtype == first.dtype
                   and layer.inputs.hidden == first.hidden for layer in layers)

    def _in_turn(self, per_node: list[list[Any]]) -> tuple:
        """Each node's own kernel, a failure named after its node."""
        outputs: tuple = ()
        for step, values in zip(self.group, per_node):
            try:
                result = step.fn(*values, **step.keywords)
            except Exception as err:
                raise _failure(step, values, err) from err
            outputs += tuple(result)[: len(step.outputs)]
        return outputs

    def _declared(self, outputs: tuple) -> tuple:
        """The outputs the nodes declare (a node may declare Y alone), in the fused step's order."""
        declared: tuple = ()
        start = 0
        for step in self.group:
            count = 3 if self.op == "LSTM" else 2
            declared += outputs[start : start + len(step.outputs)]
            start += count
        return declared
