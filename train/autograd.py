"""The reverse-mode engine: graph recording, topological order, gradient accumulation.

Each op builds its result with :func:`make_result`, giving the parent tensors and a closure
that maps the gradient of the result to one gradient per parent (``None`` where a parent
needs none). :func:`run_backward` walks the recorded graph in reverse topological order,
computed iteratively so that deep networks never meet Python's recursion limit, and sums the
gradients reaching a tensor along different paths (micrograd's ``engine.py`` in array form).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from train.tensor import Tensor

Backward = Callable[[np.ndarray], Sequence["np.ndarray | None"]]


class _GradMode:
    enabled = True


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Run the block without recording a graph (inference, evaluation, optimizer updates)."""
    previous = _GradMode.enabled
    _GradMode.enabled = False
    try:
        yield
    finally:
        _GradMode.enabled = previous


def is_grad_enabled() -> bool:
    return _GradMode.enabled


def make_result(data: np.ndarray, parents: tuple[Tensor, ...], backward: Backward) -> Tensor:
    """Wrap ``data`` as an op's output; record the graph edge only when a parent needs a gradient."""
    from train.tensor import Tensor

    out = Tensor(data)
    if _GradMode.enabled and any(p.requires_grad for p in parents):
        out.requires_grad = True
        out._parents = parents
        out._backward = backward
    return out


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes numpy broadcasting added or stretched to reach ``shape``."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(axis=stretched, keepdims=True)
    return grad.reshape(shape)


def topological_order(roots: Sequence[Tensor]) -> list[Tensor]:
    """Nodes reachable from ``roots`` (through tensors that require grad), parents first."""
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for parent in node._parents:
            if parent.requires_grad and id(parent) not in visited:
                stack.append((parent, False))
    return order


def run_backward(roots: Sequence[Tensor], douts: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
    """Backpropagate ``douts`` from ``roots``; return ``{id(leaf): gradient}`` for every leaf reached.

    Intermediate gradients are dropped as soon as they have been passed on, so memory stays
    close to that of the forward pass.
    """
    grads: dict[int, np.ndarray] = {}
    for root, dout in zip(roots, douts):
        _accumulate(grads, root, dout)
    leaves: dict[int, np.ndarray] = {}
    for node in reversed(topological_order(roots)):
        grad = grads.pop(id(node), None)
        if grad is None:
            continue
        if node._backward is None:
            leaves[id(node)] = grad
            continue
        for parent, parent_grad in zip(node._parents, node._backward(grad)):
            if parent_grad is not None and parent.requires_grad:
                _accumulate(grads, parent, parent_grad)
    return leaves


def _accumulate(grads: dict[int, np.ndarray], node: Tensor, grad: np.ndarray) -> None:
    key = id(node)
    if key in grads:
        # a fresh array: the existing one may be a view of some op's saved buffer
        grads[key] = grads[key] + grad
    else:
        grads[key] = grad
