"""Products by constant weights in blocks of output columns (lite.ops._gemm_blocks): the blocks
chosen, the values (float32 rounding of the exact product), and a model's fused steps agreeing
with its nodes run one by one."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from lite.ops import _gemm_blocks as gemm_blocks
from lite.ops.mat_mul import MatMul
from tests.lite.engines.fusion_tools import node_by_node


@pytest.mark.parametrize("rows, depth, columns, expected", [
    (4, 256, 1024, 2),  # 1.05 M multiply-adds: two blocks of 512 columns
    (16, 512, 256, 4),
    (16, 1024, 256, 8),  # blocks of 32 columns, the narrowest
    (16, 64, 1000, 2),
    (65, 64, 192, 1),  # under a million multiply-adds: one product
    (64, 512, 128, 1),  # a million per block would need blocks of 16 columns
    (1024, 32, 128, 1),  # more than MAX_ROWS rows
    (16, 256, 1000, 5),  # equal blocks: of 200 columns
])
def test_the_fewest_blocks_within_a_million_multiply_adds(rows, depth, columns, expected):
    assert gemm_blocks.blocks(rows, depth, columns) == expected


@pytest.mark.parametrize("rows, depth, columns, expected", [
    (1024, 32, 128, 128),  # 8 blocks of 128 rows
    (1024, 32, 96, 256),
    (256, 128, 64, 64),
    (256, 256, 64, 0),  # too deep
    (1024, 64, 256, 0),  # blocks of a million would be of 32 rows
    (256, 32, 16, 0),  # under a million multiply-adds
])
def test_the_largest_blocks_of_rows_within_a_million_multiply_adds(rows, depth, columns, expected):
    assert gemm_blocks.row_block(rows, depth, columns) == expected


@pytest.mark.parametrize("shape, columns", [((16, 512), 256), ((4, 256), 1024), ((2, 3, 16, 512), 256),
                                            ((5, 16, 128), 512), ((65, 64), 192), ((1, 1024, 32), 128),
                                            ((3, 256, 128), 64)])
def test_products_in_blocks_are_the_product(shape, columns):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[-1], columns)).astype(np.float32)
    w.flags.writeable = False
    got = gemm_blocks.product(a, w)
    exact = a.astype(np.float64) @ w.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == np.float32
    # Every element one dot product over the whole depth: float32 rounding of it, as numpy's.
    tolerance = 4 * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(w).astype(np.float64))
    assert np.all(np.abs(got - exact) <= tolerance)
    np.testing.assert_array_equal(MatMul(a, w), got)  # the kernel takes the same path
    np.testing.assert_array_equal(gemm_blocks.product(a, w), got)  # and the kept plan


def test_float64_products_are_numpys():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((16, 512))
    w = rng.standard_normal((512, 256))
    w.flags.writeable = False
    np.testing.assert_array_equal(gemm_blocks.product(a, w), np.matmul(a, w))


def test_computed_weights_are_multiplied_as_numpy_does():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 512)).astype(np.float32)
    w = rng.standard_normal((512, 256)).astype(np.float32)  # writeable: not a constant
    assert not gemm_blocks.suits(a, w)
    np.testing.assert_array_equal(MatMul(a, w), np.matmul(a, w))


def mlp_model():
    """x (1, 16, 256) -> MatMul + bias -> Relu -> MatMul + bias -> Add(x) -> y: a transformer's
    MLP, both products past a million multiply-adds on 16 rows."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("mlp", opset=13)
    x = b.input("x", np.float32, [1, 16, 256])
    up = b.node("Add", [b.node("MatMul", [x, b.constant("w1", rng.standard_normal((256, 1024)).astype(np.float32))]),
                        b.constant("b1", rng.standard_normal(1024).astype(np.float32))])
    hidden = b.node("Relu", [up])
    down = b.node("Add", [b.node("MatMul", [hidden, b.constant("w2", rng.standard_normal((1024, 256))
                                                                 .astype(np.float32))]),
                          b.constant("b2", rng.standard_normal(256).astype(np.float32))])
    y = b.node("Add", [down, x], outputs=["y"])
    b.output(y, np.float32, None)
    return load(to_bytes(b.build()))


def test_a_models_fused_products_agree_with_its_nodes(monkeypatch):
    # The engine drops BLAS to one thread while other tasks run; OpenBLAS's AVX2 (Haswell) kernels
    # round a product at one and two threads differently, so on a busy AVX2 machine the two runs
    # below would use different kernels. Bit for bit, both run as on an idle machine.
    from lite.ops import _blas

    monkeypatch.setattr(_blas, "others_running", lambda: False)
    model = mlp_model()
    engine = NumpyEngine(model)
    inputs = {"x": np.random.default_rng(6).standard_normal((1, 16, 256)).astype(np.float32)}
    got = engine.run(inputs)["y"]
    np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])
    plan = engine.plans[0]
    w1, b1, w2, b2 = (plan.constants[plan.index_of[name]] for name in ("w1", "b1", "w2", "b2"))
    x = inputs["x"].astype(np.float64)
    expected = np.maximum(x @ w1 + b1, 0) @ w2 + b2 + x
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_one_stack_of_the_weights_serves_every_input_shape_and_goes_with_them():
    """The weights are stacked once, in the most blocks any input shape asked for, and every
    input shape uses that stack (a copy per shape grew a BERT by 99 MB per new sequence length);
    no entry keeps the weights alive (they may be views of a deleted model's memory-mapped file)."""
    import gc
    import weakref

    weights = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    weights.flags.writeable = False
    for rows in (4, 5, 6, 7, 8):
        a = np.random.default_rng(rows).standard_normal((2, rows, 256)).astype(np.float32)
        np.testing.assert_allclose(gemm_blocks.product(a, weights), a @ weights, rtol=1e-4, atol=1e-4)
    owner = id(weights)
    most = max(gemm_blocks.blocks(rows, 256, 1024) for rows in (4, 5, 6, 7, 8))
    assert len(gemm_blocks._stacks[owner]) == most > 1
    for rows in (4, 5, 6, 7, 8):  # again, on the one stack
        a = np.random.default_rng(rows).standard_normal((2, rows, 256)).astype(np.float32)
        np.testing.assert_allclose(gemm_blocks.product(a, weights), a @ weights, rtol=1e-4, atol=1e-4)
    assert sum(key[0] == owner for key in gemm_blocks._plans) == 5
    gone = weakref.ref(weights)
    del weights
    gc.collect()
    assert gone() is None
    assert owner not in gemm_blocks._stacks and not any(key[0] == owner for key in gemm_blocks._plans)
