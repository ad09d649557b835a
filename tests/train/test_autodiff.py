"""Reverse-mode autodiff: op gradients, accumulation, deep graphs, grad/value_and_grad shapes, bprop."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train.gradcheck import check_function
from train import GradientError, Parameter, Tensor, grad, nn, no_grad, ops, value_and_grad

rng = np.random.default_rng(0)


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda a, b: a + b, [(3, 4), (4,)]),
        (lambda a, b: a - b, [(3, 1), (1, 4)]),
        (lambda a, b: a * b, [(2, 3, 4), (3, 1)]),
        (lambda a, b: a / (b * b + 1.0), [(3, 4), (3, 4)]),
        (lambda a, b: a @ b, [(3, 5), (5, 2)]),
        (lambda a: -a, [(4,)]),
        (lambda a: (a * a + 1.0) ** 1.5, [(3, 3)]),
        (lambda a: a.exp(), [(3, 2)]),
        (lambda a: (a * a + 0.5).log(), [(3, 2)]),
        (lambda a: ops.sqrt(a * a + 0.5), [(3, 2)]),
        (lambda a: ops.erf(a), [(5,)]),
        (lambda a: a.sum(axis=1), [(3, 4)]),
        (lambda a: a.sum(axis=(0, 2), keepdims=True), [(2, 3, 4)]),
        (lambda a: a.mean(), [(3, 4)]),
        (lambda a: a.mean(axis=0), [(3, 4)]),
        (lambda a: a.reshape(6, 2), [(3, 4)]),
        (lambda a: a.transpose(1, 0, 2), [(2, 3, 4)]),
        (lambda a: a[1:, ::2], [(3, 4)]),
        (lambda a, b: ops.concat([a, b], axis=1), [(2, 3), (2, 2)]),
        (lambda a: ops.flatten(a), [(2, 3, 2, 2)]),
        (lambda a: ops.tanh(a) * ops.sigmoid(a), [(3, 4)]),
    ],
)
def test_op_gradients_match_finite_differences(fn, shapes):
    check_function(
        fn, [rng.standard_normal(s) for s in shapes], rtol=1e-4 if len(shapes) == 1 else 1e-5, atol=1e-6
    )


def test_cast_passes_gradients_back_in_the_source_dtype():
    g = grad(lambda a: (a.astype(np.float32) * 3.0).sum())(Tensor(np.ones(2)))
    assert g.dtype == np.float64 and g.asnumpy().tolist() == [3.0, 3.0]


def test_gradients_accumulate_over_paths():
    x = Tensor(np.array([2.0, -3.0]))
    g = grad(lambda a: a * a + a * 3.0 + a)(x)
    np.testing.assert_allclose(g.asnumpy(), 2 * x.asnumpy() + 4.0)


def test_deep_chain_has_no_recursion_limit():
    def fn(a):
        for _ in range(5000):
            a = a * 1.0001 + 0.0
        return a.sum()

    g = grad(fn)(Tensor(np.ones(3)))
    np.testing.assert_allclose(g.asnumpy(), np.full(3, 1.0001**5000), rtol=1e-9)


def test_backward_accumulates_into_leaf_grad():
    w = Parameter(np.array([1.0, 2.0]), "w")
    for _ in range(2):
        (w * w).sum().backward()
    np.testing.assert_allclose(w.grad, 2 * 2 * w.data)


def test_grad_positions_weights_and_aux_shapes():
    w = Parameter(np.array([3.0]), "w")
    b = Parameter(np.array([1.0]), "b")

    def fn(x, y):
        return (x * y * w + b).sum()

    x, y = Tensor(np.array([2.0])), Tensor(np.array([5.0]))
    assert grad(fn)(x, y).asnumpy().tolist() == [15.0]
    gx, gy = grad(fn, (0, 1))(x, y)
    assert (gx.asnumpy().tolist(), gy.asnumpy().tolist()) == ([15.0], [6.0])
    inputs, weights = grad(fn, 0, [w, b])(x, y)
    assert inputs.asnumpy().tolist() == [15.0] and [g.asnumpy().tolist() for g in weights] == [[10.0], [1.0]]
    only_w = grad(fn, None, w)(x, y)
    assert only_w.asnumpy().tolist() == [10.0]
    value, grads = value_and_grad(lambda a: ((a * a).sum(), a * 2.0), 0, has_aux=True)(x)
    assert float(value[0].asnumpy()) == 4.0 and grads.asnumpy().tolist() == [4.0]
    g, aux = grad(lambda a: ((a * a).sum(), a * 2.0), has_aux=True)(x)
    assert g.asnumpy().tolist() == [4.0] and aux.asnumpy().tolist() == [4.0]


def test_grad_of_unused_input_is_zero():
    g = grad(lambda a, b: (a * 2.0).sum(), 1)(Tensor(np.ones(2)), Tensor(np.ones(3)))
    assert g.asnumpy().tolist() == [0.0, 0.0, 0.0]


def test_grad_errors_are_typed():
    with pytest.raises(GradientError, match="both be None"):
        value_and_grad(lambda a: a, None, None)
    with pytest.raises(GradientError, match="out of range"):
        grad(lambda a: a.sum(), 3)(Tensor(np.ones(2)))
    with pytest.raises(GradientError, match="has_aux"):
        grad(lambda a: a.sum(), has_aux=True)(Tensor(np.ones(2)))


def test_cell_bprop_replaces_autodiff():
    class ClippedSquare(nn.Cell):
        def construct(self, x):
            return x * x

        def bprop(self, x, out, dout):
            return (dout * 100.0,)  # deliberately not 2x: proves bprop is used

    cell = ClippedSquare()
    g = grad(lambda a: cell(a).sum())(Tensor(np.array([1.0, 2.0])))
    assert g.asnumpy().tolist() == [100.0, 100.0]


def test_bprop_with_wrong_arity_is_reported():
    class Bad(nn.Cell):
        def construct(self, x, y):
            return x * y

        def bprop(self, x, y, out, dout):
            return (dout,)

    with pytest.raises(GradientError, match="2 gradients"):
        grad(lambda a, b: Bad()(a, b).sum())(Tensor(np.ones(2)), Tensor(np.ones(2)))


def test_no_grad_records_nothing():
    w = Parameter(np.ones(2), "w")
    with no_grad():
        out = w * 2.0
    assert not out.requires_grad and out._parents == ()
    assert (w * 2.0).requires_grad


def test_python_scalars_keep_float32():
    x = Tensor(np.ones(3, dtype=np.float32))
    assert (x * 0.5 + 1.0).dtype == np.float32
    assert Tensor(1.0).dtype == np.float32


def test_blas_thread_count_is_set_and_restored():
    from train import get_num_threads, num_threads, set_num_threads

    before = get_num_threads()
    with num_threads(1):
        assert get_num_threads() in (1, None)
    assert get_num_threads() == before
    with pytest.raises(ValueError, match=">= 1"):
        set_num_threads(0)
