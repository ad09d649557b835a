"""Products by constant weight matrices cut into blocks of output columns, where OpenBLAS is slow.

OpenBLAS (0.3.31, its SkylakeX kernels on AVX-512) multiplies a product of at most a million
multiply-adds with its small-matrix kernel, straight from the operands; past that it packs both
operands on every call, which a product of a few rows never repays (and may hand half of it to a
second thread). Such a ``(rows, K) @ (K, N)`` product ran at a third to two thirds of the speed
of the same work as equal blocks of the weights' columns, each of at most a million
multiply-adds, in one batched ``np.matmul`` of a ``(blocks, K, N / blocks)`` stack against the
one input. On one core, in µs (median of 15 alternated runs): (4 x 256) @ (256 x 1024) 79 -> 21
in 2 blocks, (16 x 512) @ (512 x 256) 56 -> 30 in 4, (16 x 256) @ (256 x 768) 79 -> 44 in 4,
(16 x 1024) @ (1024 x 256) 121 -> 90 in 8, (16 x 64) @ (64 x 1000) 25 -> 18 in 2,
(64 x 128) @ (128 x 384) 60 -> 41 in 4, (256 x 64) @ (64 x 256) 70 -> 59 in 8. Blocks past the
million (4 of (16 x 256) @ (256 x 1024): 117 against 111 unblocked) or narrower than 32 columns
((64 x 512) @ (512 x 128) in 8 blocks of 16: 88 against 71) lost it.

Each output element is still one dot product over the whole of K, computed by one of
OpenBLAS's kernels: the result may differ from the unblocked product's in the last bits
(another kernel's order of the multiply-adds), never more. Every MatMul by constant weights
(the MatMul kernel, the engine's fused bias and epilogue steps, the shared-input product)
goes through :func:`product`, so a model's steps agree with their node-by-node run.
"""

from __future__ import annotations

import weakref

import numpy as np

from lite.plan_cache import PlanCache

# Products of more than BLOCK_MULTIPLY_ADDS multiply-adds, on at most MAX_ROWS rows, run in
# blocks of at most BLOCK_MULTIPLY_ADDS (OpenBLAS's small-matrix kernel) and at least MIN_WIDTH
# columns.
BLOCK_MULTIPLY_ADDS = 1_000_000
MAX_ROWS = 256
MIN_WIDTH = 32
# A product that no blocks of columns suit, of a depth of at most ROWS_MAX_DEPTH, runs in blocks
# of at least ROWS_MIN_BLOCK of its rows, each of at most BLOCK_MULTIPLY_ADDS (see row_block).
ROWS_MAX_DEPTH = 128
ROWS_MIN_BLOCK = 64
# Plans kept, of products (weights, input shape): tiny, a model's weight matrices times the input
# shapes a server cycles through; and stacks, of weight matrices.
_PLANS_KEPT = 4096
_STACKS_KEPT = 256


def blocks(rows: int, depth: int, columns: int) -> int:
    """The fewest equal blocks of the ``columns``, each of at most BLOCK_MULTIPLY_ADDS and at
    least MIN_WIDTH wide, for a ``(rows, depth) @ (depth, columns)`` product in the slow regime
    (module docstring); 1 (no blocks) outside it or where no divisor of ``columns`` gives them."""
    if rows > MAX_ROWS or rows * depth * columns <= BLOCK_MULTIPLY_ADDS:
        return 1
    for count in range(2, columns // MIN_WIDTH + 1):
        if columns % count == 0 and rows * depth * (columns // count) <= BLOCK_MULTIPLY_ADDS:
            return count
    return 1


def row_block(rows: int, depth: int, columns: int) -> int:
    """The rows of the largest equal blocks of the ``rows``, each of at most BLOCK_MULTIPLY_ADDS
    and ROWS_MIN_BLOCK rows at least, for a ``(rows, depth) @ (depth, columns)`` product past a
    million multiply-adds of a depth of at most ROWS_MAX_DEPTH; 0 (no blocks) otherwise.

    Tall products of a shallow depth (a hierarchical transformer's first stage) are slow too
    and too narrow for blocks of columns; each block of rows is a product numpy runs on its own
    (one ``np.matmul`` of the input as a stack of them), in µs on one core: (1024 x 32) @
    (32 x 128) 81 -> 63 in 8 blocks, (1024 x 128) @ (128 x 32) 81 -> 51 in 8, (1024 x 32) @
    (32 x 96) 62 -> 44 in 4, (256 x 128) @ (128 x 64) 52 -> 42 in 4. Deeper ones lost it
    ((256 x 256) @ (256 x 64) 84 -> 97 in 8), and so did blocks of 32 rows ((1024 x 64) @
    (64 x 256) 261 -> 359)."""
    if depth > ROWS_MAX_DEPTH or rows * depth * columns <= BLOCK_MULTIPLY_ADDS:
        return 0
    for count in range(2, rows // ROWS_MIN_BLOCK + 1):
        if rows % count == 0 and rows // count * depth * columns <= BLOCK_MULTIPLY_ADDS:
            return rows // count
    return 0


def stacked(weights: np.ndarray, count: int) -> np.ndarray:
    """``weights`` (K, N) as ``count`` contiguous blocks of its columns: (count, K, N / count)."""
    depth, columns = weights.shape
    return np.ascontiguousarray(weights.reshape(depth, count, columns // count).transpose(1, 0, 2))


def blocked_matmul(x: np.ndarray, stack: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` (batch, rows, N) := ``x`` (batch, rows, K) @ the weights ``stack`` holds, block by
    block: the blocks' outputs are column ranges of ``out``, written through a strided view of it."""
    batch, rows = out.shape[:2]
    view = out.reshape(batch, rows, stack.shape[0], -1).transpose(0, 2, 1, 3)
    np.matmul(x[:, None], stack, out=view)
    return out


# (id of the weights, input shape) -> (their stack of column blocks or None, the rows of a row
# block or 0); id of the weights -> their one stack, in the most blocks any input shape asked for
# (fewer rows would take fewer, but more blocks are as fast: (2 x 768) @ (768 x 3072) in 6 or 48
# blocks of columns alike), so each weight matrix is copied once (a stack per shape grew a 4-layer
# BERT by 99 MB per new sequence length, to 2 GB). Entries hold no reference to the weights, which
# may be views of a model's memory-mapped file: they go when the weights do (a weak reference
# each), so a deleted model leaves nothing mapped.
_plans: PlanCache[tuple[np.ndarray | None, int]] = PlanCache(entries=_PLANS_KEPT)
_stacks: PlanCache[np.ndarray] = PlanCache(entries=_STACKS_KEPT)
_watched: dict[int, weakref.ref] = {}


def product(a: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``np.matmul(a, weights)`` for a float ``a`` (..., rows, K) and constant 2-D float
    ``weights`` (K, N) of its type, in blocks of columns or else of rows where that is faster
    (module docstring, :func:`row_block`). numpy multiplies each (rows, K) matrix of ``a`` on
    its own: the regime is that of one.

    The plan is made once per weights and input shape; the weights are stacked once."""
    if a.size * weights.shape[1] <= BLOCK_MULTIPLY_ADDS:  # most of a small model's: no plan to look up
        return np.matmul(a, weights)
    key = (id(weights), a.shape)
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(weights, a.shape)
    stack, rows_each = plan
    if stack is not None:
        rows, depth = a.shape[-2:]
        out = np.empty(a.shape[:-1] + (weights.shape[1],), a.dtype)
        blocked_matmul(a.reshape(-1, rows, depth), stack, out.reshape(-1, rows, weights.shape[1]))
        return out
    if rows_each:
        return np.matmul(a.reshape(-1, rows_each, a.shape[-1]), weights).reshape(a.shape[:-1] + (weights.shape[1],))
    return np.matmul(a, weights)


def _plan(weights: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray | None, int]:
    rows, (depth, columns) = shape[-2], weights.shape
    # Measured for float32 (sgemm): float64 keeps numpy's product.
    count = blocks(rows, depth, columns) if weights.dtype == np.float32 else 1
    rows_each = row_block(rows, depth, columns) if count == 1 and weights.dtype == np.float32 else 0
    owner = id(weights)
    if owner not in _watched:
        _watched[owner] = weakref.ref(weights, lambda _, owner=owner: _forget(owner))
    stack = None
    if count > 1:
        stack = _stacks.get(owner)
        if stack is None or len(stack) < count:
            if stack is not None:  # plans of fewer blocks go with the smaller stack
                _forget_plans(owner)
            stack = _stacks.put(owner, stacked(weights, count))
    return _plans.put((owner, shape), (stack, rows_each))


def _forget(owner: int) -> None:
    """The weights of these entries are gone (their id may be reused): drop the entries."""
    _watched.pop(owner, None)
    _stacks.pop(owner)
    _forget_plans(owner)


def _forget_plans(owner: int) -> None:
    for key in [key for key in _plans.keys() if key[0] == owner]:
        _plans.pop(key)


def suits(a: object, weights: np.ndarray) -> bool:
    """Whether :func:`product` computes ``a @ weights``: ``a`` a float array of at least 2 axes,
    of the type of ``weights``, a read-only (constant) 2-D float matrix."""
    return (type(a) is np.ndarray and a.dtype is weights.dtype and a.ndim >= 2 and weights.ndim == 2
            and weights.dtype.kind == "f" and weights.dtype.itemsize >= 4 and not weights.flags.writeable)
