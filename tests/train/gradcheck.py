"""Finite-difference gradient checks in float64 for ops, cells and losses."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from train import Tensor, value_and_grad
from train.nn import Cell


def numerical_gradient(f: Callable[[], float], array: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``f()`` with respect to every element of ``array`` (modified in place)."""
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        original = array[index]
        array[index] = original + eps
        plus = f()
        array[index] = original - eps
        minus = f()
        array[index] = original
        grad[index] = (plus - minus) / (2 * eps)
    return grad


def to_float64(cell: Cell) -> Cell:
    for param in cell.get_parameters():
        param.set_data(param.data.astype(np.float64))
    return cell


def check_function(
    fn: Callable[..., Tensor],
    arrays: Sequence[np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-7,
    seed: int = 0,
) -> None:
    """d(sum(fn(*inputs) * R))/d(inputs) analytic vs numerical; R is a fixed random projection."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    projection: list[np.ndarray] = []

    def scalar(*tensors: Tensor) -> Tensor:
        out = fn(*tensors)
        if not projection:
            projection.append(np.asarray(np.random.default_rng(seed).standard_normal(out.shape)))
        return (out * Tensor(projection[0])).sum()

    positions = tuple(range(len(arrays)))
    _, grads = value_and_grad(scalar, positions)(*[Tensor(a) for a in arrays])
    for position, array in enumerate(arrays):
        expected = numerical_gradient(lambda: float(scalar(*[Tensor(a) for a in arrays]).asnumpy()), array)
        np.testing.assert_allclose(
            grads[position].asnumpy(), expected, rtol=rtol, atol=atol, err_msg=f"gradient of input {position}"
        )


def check_cell(
    cell: Cell,
    inputs: Sequence[np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-7,
    check_inputs: bool = True,
) -> None:
    """Gradients of a float64 cell with respect to its inputs and every trainable parameter."""
    to_float64(cell)
    arrays = [np.array(a, dtype=np.float64) for a in inputs]
    params = cell.trainable_params()
    rng = np.random.default_rng(1)
    projection = np.asarray(rng.standard_normal(np.shape(cell(*[Tensor(a) for a in arrays]).asnumpy())))

    def scalar(*tensors: Tensor) -> Tensor:
        return (cell(*tensors) * Tensor(projection)).sum()

    positions = tuple(range(len(arrays))) if check_inputs else None
    _, grads = value_and_grad(scalar, positions, params)(*[Tensor(a) for a in arrays])
    input_grads, param_grads = grads if check_inputs else ((), grads)

    def value() -> float:
        return float(scalar(*[Tensor(a) for a in arrays]).asnumpy())

    for position, array in enumerate(arrays if check_inputs else []):
        np.testing.assert_allclose(
            input_grads[position].asnumpy(),
            numerical_gradient(value, array),
            rtol=rtol,
            atol=atol,
            err_msg=f"{type(cell).__name__}: input {position}",
        )
    for param, analytic in zip(params, param_grads):
        np.testing.assert_allclose(
            analytic.asnumpy(),
            numerical_gradient(value, param.data),
            rtol=rtol,
            atol=atol,
            err_msg=f"{type(cell).__name__}: parameter {param.name}",
        )
