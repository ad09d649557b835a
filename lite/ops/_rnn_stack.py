"""What the default cells' time loops run on: one recurrent node, or several stacked.

A :class:`Stack` holds one or more nodes of one cell kind (:class:`Layer`: a node's inputs in
layout 0 and its prepared weights) whose directions the loop runs side by side, on the
directions axis: a bidirectional node's two, or independent nodes of the same hidden size
and sequence (madmom's bidirectional layers are two forward nodes, one on the input reversed
in time, which the numpy engine runs as one loop: :mod:`lite.engines.numpy_recurrent_stack`).
Every elementwise call of a step then covers all of them, and the recurrence of every
direction is one stacked matmul. Each direction keeps its own weights, input projection, states
and sequence lengths; the outputs are split back per node at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from lite.ops._rnn_common import TimeMajor

if TYPE_CHECKING:
    from lite.ops._rnn_default_cells import CellWeights


class Layer(NamedTuple):
    inputs: TimeMajor
    weights: CellWeights


class Stack:
    """The layers of one loop: their directions stacked, first layer's first.

    ``r_t``, ``r_h_t`` and ``peepholes`` join the layers' on the directions axis (a single
    layer's are used as they are)."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.layers = list(layers)
        first = self.layers[0].inputs
        self.hidden, self.dtype = first.hidden, first.dtype
        self.seq_length, self.batch = first.X.shape[:2]
        self.backwards = tuple(back for layer in self.layers for back in layer.inputs.backwards)
        self.r_t = self._joined("r_t", 0)
        self.r_h_t = self._joined("r_h_t", 0)
        self.peepholes = self._joined("peepholes", 1)

    def _joined(self, name: str, axis: int) -> np.ndarray | None:
        parts = [getattr(layer.weights, name) for layer in self.layers]
        if parts[0] is None:
            return None
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def project(self) -> np.ndarray:
        """Every layer's :func:`project`, side by side on the directions axis."""
        parts = [project(layer.inputs, layer.weights) for layer in self.layers]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)

    def state(self, index: int) -> np.ndarray:
        """State ``index`` (0: h, 1: c) of every direction, a private copy the loop may write."""
        parts = [layer.inputs.state(index) for layer in self.layers]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def masks(self) -> np.ndarray | None:
        """``active[t]`` per direction, ``(seq, directions, batch, 1)``, a reverse direction's
        reversed in time like its projection; None where every sequence is full."""
        if all(layer.inputs.masks is None for layer in self.layers):
            return None
        full = np.ones((self.seq_length, self.batch, 1), bool)
        per_direction = []
        for layer in self.layers:
            masks = full if layer.inputs.masks is None else layer.inputs.masks
            per_direction += [masks[::-1] if back else masks for back in layer.inputs.backwards]
        return np.stack(per_direction, axis=1)

    def finish(self, Y: np.ndarray, finals: Sequence[np.ndarray]) -> tuple:
        """Each layer's outputs (:meth:`TimeMajor.finish`), one layer's after the other's."""
        outputs: tuple = ()
        start = 0
        for layer in self.layers:
            end = start + len(layer.inputs.backwards)
            outputs += layer.inputs.finish(Y[:, start:end], [final[start:end] for final in finals])
            start = end
        return outputs


def project(inputs: TimeMajor, weights: CellWeights) -> np.ndarray:
    """``X @ W^T + bias`` of every step, gate-major: ``(seq, gates, directions, batch, H)``, a
    reverse direction's reversed in time. GRU with linear_before_reset gets Rbh as a gate between
    r and the candidate, ``[z, r, Rbh, h]``: added with the recurrence in one call."""
    X, hidden = inputs.X, inputs.hidden
    seq_length, batch = X.shape[:2]
    rows = X.reshape(seq_length * batch, X.shape[2])
    gates = weights.bias.shape[1] // hidden
    rbh = weights.recurrent_bias
    projected = np.empty((seq_length, gates + (rbh is not None), len(inputs.backwards), batch, hidden), X.dtype)
    products = np.matmul(rows, weights.w_t).reshape(seq_length, batch, len(inputs.backwards), gates, hidden)
    for d, backwards in enumerate(inputs.backwards):
        product = products[:, :, d]
        product = (product[::-1] if backwards else product).transpose(0, 2, 1, 3)
        bias = weights.bias[d].reshape(gates, 1, hidden)
        if rbh is None:
            np.add(product, bias, out=projected[:, :, d])
        else:
            np.add(product[:, :2], bias[:2], out=projected[:, :2, d])
            projected[:, 2, d] = rbh[d]
            np.add(product[:, 2:], bias[2:], out=projected[:, 3:, d])
    return projected


def gate_major(out: np.ndarray, hidden: int) -> np.ndarray:
    """The recurrence's ``(directions, batch, gates * H)`` seen as ``(gates, directions, batch, H)``:
    the step reads it once, in the call that adds the projection, and works on contiguous gates."""
    directions, batch, width = out.shape
    return out.reshape(directions, batch, width // hidden, hidden).transpose(2, 0, 1, 3)


class Steps:
    """What a loop shares: the outputs buffer (a reverse direction's steps stored reversed), the
    hidden state, and the masks of sequence_lens (stacked per direction, reversed likewise)."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.Y = np.empty((stack.seq_length, len(stack.backwards), stack.batch, stack.hidden), stack.dtype)
        self.h = stack.state(0)
        self.active = stack.masks()
        self.inactive = None if self.active is None else ~self.active

    def emit(self, t: int, output: np.ndarray) -> np.ndarray:
        """Step t's output, written into Y[t], becomes the hidden state; past an entry's
        sequence the state stays and the output is 0. Returns the state for step t + 1."""
        if self.active is None:
            self.h = output
        else:
            np.copyto(self.h, output, where=self.active[t])
            np.copyto(output, 0, where=self.inactive[t])
        return self.h

    def keep(self, t: int, new: np.ndarray, old: np.ndarray) -> None:
        """Another state (LSTM's c) keeps its old value past an entry's sequence."""
        if self.inactive is not None:
            np.copyto(new, old, where=self.inactive[t])

    def finish(self, *other_states: np.ndarray) -> tuple:
        """Y in time order, the final states (copied: the last h may be a slice of Y)."""
        finals = [np.array(self.h), *other_states]
        return self.stack.finish(in_time_order(self.Y, self.stack.backwards), finals)


def in_time_order(Y: np.ndarray, backwards: tuple[bool, ...]) -> np.ndarray:
    """Y ``(seq, directions, batch, H)`` with each reverse direction's steps, stored in the order
    the loop ran them, flipped in place into time order."""
    for d, back in enumerate(backwards):
        if back:
            Y[:, d] = Y[::-1, d].copy()
    return Y
