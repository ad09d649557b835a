"""``grad`` and ``value_and_grad`` with ``mindspore.grad``'s arguments and return shapes.

Source of the semantics: ``mindspore/ops/function/grad/grad_func.py`` (reference §4):

* ``grad_position`` int -> that input's gradient; tuple -> a tuple; ``None`` -> inputs skipped
  (then ``weights`` is required).
* ``weights`` given -> ``(input_grads, weight_grads)``, or only ``weight_grads`` when
  ``grad_position`` is ``None``; a single Parameter gives a single gradient, a list a tuple.
* ``has_aux`` -> only the first output is differentiated; the rest is returned alongside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from train.autograd import run_backward
from train.errors import GradientError
from train.tensor import Parameter, Tensor

Weights = Parameter | Sequence[Parameter] | None


def _positions(grad_position: int | Sequence[int] | None, count: int) -> tuple[int, ...]:
    if grad_position is None:
        return ()
    positions = (grad_position,) if isinstance(grad_position, int) else tuple(grad_position)
    for p in positions:
        if not -count <= p < count:
            raise GradientError(
                f"grad_position {p} is out of range for a function called with {count} inputs"
            )
    return tuple(p % count for p in positions)


def _forward(
    fn: Callable, args: tuple, positions: tuple[int, ...], weights: list[Parameter], has_aux: bool
) -> tuple[Any, Any, list[Tensor]]:
    call_args = list(args)
    inputs: list[Tensor] = []
    for p in positions:
        leaf = Tensor(
            args[p].data if isinstance(args[p], Tensor) else np.asarray(args[p]), requires_grad=True
        )
        call_args[p] = leaf
        inputs.append(leaf)
    for w in weights:
        if not isinstance(w, Parameter):
            raise GradientError(
                f"weights must be Parameters (e.g. net.trainable_params()), got {type(w).__name__}"
            )
    value = fn(*call_args)
    differentiated: Any = value
    if has_aux:
        if not isinstance(value, tuple) or len(value) < 2:
            raise GradientError("has_aux=True needs fn to return a tuple (output, aux, ...)")
        differentiated = value[0]
    return value, differentiated, inputs


def _gradients(differentiated: Any, inputs: list[Tensor], weights: list[Parameter]) -> tuple[list, list]:
    outputs = list(differentiated) if isinstance(differentiated, tuple) else [differentiated]
    roots = [o for o in outputs if isinstance(o, Tensor) and o.requires_grad]
    # sensitivity of ones for each output, as MindSpore's GradOperation(sens_param=False)
    leaves = run_backward(roots, [np.ones_like(r.data) for r in roots]) if roots else {}

    def pick(t: Tensor) -> Tensor:
        g = leaves.get(id(t))
        return Tensor(np.zeros_like(t.data) if g is None else np.ascontiguousarray(g, dtype=t.dtype))

    return [pick(t) for t in inputs], [pick(w) for w in weights]


def value_and_grad(
    fn: Callable,
    grad_position: int | Sequence[int] | None = 0,
    weights: Weights = None,
    has_aux: bool = False,
) -> Callable[..., tuple[Any, Any]]:
    """Return ``f(*args) -> (fn(*args), gradients)``; see the module docstring for the shapes."""
    if grad_position is None and weights is None:
        raise GradientError("grad_position and weights cannot both be None: nothing to differentiate")
    single_weight = isinstance(weights, Parameter)
    weight_list: list[Parameter] = [weights] if single_weight else list(weights or [])  # type: ignore[list-item]

    def wrapper(*args: Any) -> tuple[Any, Any]:
        positions = _positions(grad_position, len(args))
        value, differentiated, inputs = _forward(fn, args, positions, weight_list, has_aux)
        input_grads, weight_grads = _gradients(differentiated, inputs, weight_list)
        if grad_position is None:
            in_part: Any = None
        elif isinstance(grad_position, int):
            in_part = input_grads[0]
        else:
            in_part = tuple(input_grads)
        w_part: Any = weight_grads[0] if single_weight else tuple(weight_grads)
        if weights is None:
            grads = in_part
        elif grad_position is None:
            grads = w_part
        else:
            grads = (in_part, w_part)
        return value, grads

    return wrapper


def grad(
    fn: Callable,
    grad_position: int | Sequence[int] | None = 0,
    weights: Weights = None,
    has_aux: bool = False,
) -> Callable[..., Any]:
    """Return ``f(*args) -> gradients`` (``(gradients, aux...)`` with ``has_aux``)."""
    inner = value_and_grad(fn, grad_position, weights, has_aux)

    def wrapper(*args: Any) -> Any:
        value, grads = inner(*args)
        if has_aux:
            return (grads, *value[1:])
        return grads

    return wrapper
