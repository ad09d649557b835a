"""What LSTM, GRU and RNN share: activation functions, layouts, directions, sequence lengths.

https://onnx.ai/onnx/operators/onnx__RNN.html (the activation list and its alpha/beta rules)

Inputs are brought to layout 0 ``(seq, batch, input)`` by :func:`time_major`; the input
projection ``X @ W^T + Wb`` of every step is one GEMM, and each step only does the recurrent
GEMM. A batch entry whose ``sequence_lens`` is shorter keeps its state and emits zeros past its
end; in reverse it starts at its own last step, which a per-step mask gives for free since the
loop walks the steps backwards. The default cells run in :mod:`lite.ops._rnn_default_cells`;
the others (custom activations, clip, peepholes, coupled gates) through :func:`run_directions`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lite.errors import UnsupportedOpError

# name -> (function of (x, alpha, beta), default alpha, default beta)
_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "Relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "Tanh": (lambda x, a, b: np.tanh(x), None, None),
    # sigmoid(x) = (1 + tanh(x/2)) / 2: one transcendental, and no overflow of exp(-x) for x << 0
    "Sigmoid": (lambda x, a, b: 0.5 * np.tanh(0.5 * x) + 0.5, None, None),
    "Affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, None),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), 1.0, None),
    "Softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "Softplus": (lambda x, a, b: np.log1p(np.exp(x)), None, None),
}
_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def activation_functions(
    op: str,
    names: Sequence[str] | None,
    alphas: Sequence[float] | None,
    betas: Sequence[float] | None,
    defaults: Sequence[str],
    directions: int,
) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
    """Per direction, the cell's activations; alphas/betas are consumed by the ones that take them."""
    names = list(names) if names else list(defaults) * directions
    if len(names) != len(defaults) * directions:
        raise UnsupportedOpError(
            f"{op}: expected {len(defaults) * directions} activations for {directions} direction(s), got {names}"
        )
    alphas, betas = list(alphas or []), list(betas or [])
    functions = []
    for name in names:
        matched = next((key for key in _ACTIVATIONS if key.lower() == str(name).lower()), None)
        if matched is None:
            raise UnsupportedOpError(f"{op}: unknown activation {name!r}")
        fn, default_alpha, default_beta = _ACTIVATIONS[matched]
        alpha = alphas.pop(0) if default_alpha is not None and alphas else default_alpha
        beta = betas.pop(0) if default_beta is not None and betas else default_beta
        functions.append(lambda x, fn=fn, alpha=alpha, beta=beta: fn(x, alpha, beta))
    per = len(defaults)
    return [functions[d * per : (d + 1) * per] for d in range(directions)]


_STATE_NAMES = ("initial_h", "initial_c")


def direction_count(op: str, direction: str) -> int:
    if direction not in _DIRECTIONS:
        raise UnsupportedOpError(f"{op}: direction must be forward, reverse or bidirectional, got {direction!r}")
    return _DIRECTIONS[direction]


@dataclass(slots=True)  # not frozen: its __init__ would cost more than a step of a cell
class TimeMajor:
    """A recurrent node's inputs as every cell loop starts from them: layout 0, the compute dtype
    (:func:`compute_dtype`), checked states and step masks."""

    X: np.ndarray  # (seq, batch, input)
    states: list  # per state: (directions, batch, hidden) or None
    masks: np.ndarray | None  # (seq, batch, 1) bool, see step_masks
    backwards: tuple[bool, ...]  # per direction: whether it walks the steps from the last
    hidden: int
    layout: int
    out_dtype: np.dtype

    @property
    def dtype(self) -> np.dtype:
        return self.X.dtype

    def state(self, index: int) -> np.ndarray:
        """State ``index`` (0: h, 1: c) for every direction, a private copy the loop may write."""
        given = self.states[index]
        if given is None:
            return np.zeros((len(self.backwards), self.X.shape[1], self.hidden), self.dtype)
        return np.array(given, dtype=self.dtype)

    def finish(self, Y: np.ndarray, finals: Sequence[np.ndarray]) -> tuple:
        """Y ``(seq, directions, batch, H)`` and the final states in the output dtype and layout."""
        Y = Y.astype(self.out_dtype, copy=False)
        finals = [final.astype(self.out_dtype, copy=False) for final in finals]
        if not self.layout:
            return (Y, *finals)
        return (np.transpose(Y, (2, 0, 1, 3)), *(np.swapaxes(final, 0, 1) for final in finals))


def compute_dtype(dtype: np.dtype) -> type:
    """What a recurrent layer computes in: float64 stays float64, anything else runs in float32."""
    return np.float64 if dtype == np.float64 else np.float32


def time_major(op: str, X, sequence_lens, initial_states: list, direction: str, layout: int, hidden: int) -> TimeMajor:
    """Bring a node's inputs to layout 0 and the compute dtype; check the states' shapes."""
    directions = direction_count(op, direction)
    X = np.asarray(X)
    out_dtype = X.dtype
    if layout:  # batch-major inputs
        X = np.swapaxes(X, 0, 1)
        initial_states = [None if s is None else np.swapaxes(s, 0, 1) for s in initial_states]
    X = X.astype(compute_dtype(X.dtype), copy=False)
    seq_length, batch = X.shape[:2]
    for name, state in zip(_STATE_NAMES, initial_states):
        if state is not None and np.shape(state) != (directions, batch, hidden):
            # Said here, with the shape it must have, rather than by numpy's broadcasting inside
            # the first step (a state kept from a stream of another batch size). Shapes as the
            # node's layout gives them (layout 1: batch first).
            given, wanted = np.shape(state), (directions, batch, hidden)
            if layout:
                given, wanted = (given[1], given[0], *given[2:]), (batch, directions, hidden)
            raise ValueError(f"{op}: {name} has shape {tuple(given)}; with X of batch {batch} it must be {wanted}")
    backwards = tuple(direction == "reverse" or d == 1 for d in range(directions))
    masks = step_masks(sequence_lens, seq_length, batch)
    return TimeMajor(X, list(initial_states), masks, backwards, hidden, layout, out_dtype)


def step_masks(sequence_lens, seq_length, batch):
    """``active[t]`` (batch, 1): whether step t is inside each entry's sequence; None if all are."""
    if sequence_lens is None:
        return None
    lengths = np.asarray(sequence_lens).astype(np.int64)
    if lengths.shape != (batch,) or (lengths > seq_length).any() or (lengths < 0).any():
        raise UnsupportedOpError(
            f"sequence_lens must hold {batch} lengths within 0..{seq_length}, got {lengths.tolist()}"
        )
    if (lengths == seq_length).all():
        return None
    return (np.arange(seq_length)[:, None] < lengths[None, :])[:, :, None]


def run_directions(op: str, inputs: TimeMajor, state_count: int, step_factory: Callable[[int], Callable]):
    """Run ``step(x_projected_t, states) -> (output, states)`` over time, one direction after the
    other: the loop of cells with non-default activations, clip, peepholes or coupled gates.

    ``step_factory(d)`` returns direction d's step function and its input projection
    ``project(X) -> (seq, batch, k)``.
    """
    X, masks, hidden = inputs.X, inputs.masks, inputs.hidden
    seq_length, batch = X.shape[:2]
    directions = len(inputs.backwards)
    Y = np.zeros((seq_length, directions, batch, hidden), dtype=X.dtype)
    initial = [inputs.state(index) for index in range(state_count)]
    finals = [np.zeros_like(state) for state in initial]
    for d, backwards in enumerate(inputs.backwards):
        step, project = step_factory(d)
        projected = project(X)
        states = [state[d] for state in initial]
        for t in (range(seq_length - 1, -1, -1) if backwards else range(seq_length)):
            output, new_states = step(projected[t], states)
            if masks is not None:
                active = masks[t]
                output = np.where(active, output, 0)
                new_states = [np.where(active, new, old) for new, old in zip(new_states, states)]
            Y[t, d] = output
            states = new_states
        for final, state in zip(finals, states):
            final[d] = state
    return inputs.finish(Y, finals)


def clipper(clip):
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)
