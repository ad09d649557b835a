"""TfIdfVectorizer: count the pool's n-grams (with skips) in each row, optionally IDF-weighted.

https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html

The pool (``pool_int64s`` or ``pool_strings``) lists the 1-grams, then the 2-grams, ...;
``ngram_counts[k]`` is the pool position where the (k+1)-grams start. The i-th pool n-gram is
counted into output coordinate ``ngram_indexes[i]``. An n-gram of X with skip ``s`` takes every
``(s + 1)``-th item; all ``n`` in ``[min_gram_length, max_gram_length]`` and ``s`` in
``[0, max_skip_count]`` are scanned (1-grams once, skips do not change them). ``mode``: TF
counts, IDF ``min(count, 1) * weight``, TFIDF ``count * weight``. X is ``[C]`` or ``[N, C]``;
Y is float32 ``[max(ngram_indexes) + 1]`` or ``[N, max(ngram_indexes) + 1]``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel
from lite.ops.string_ops import as_text


def _pool_ngrams(pool: list, ngram_counts: list[int]) -> list[tuple]:
    """The pool cut into n-grams, in order: n-grams of length k+1 start at ngram_counts[k]."""
    ngrams = []
    bounds = list(ngram_counts) + [len(pool)]
    for length_index in range(len(ngram_counts)):
        start, stop = bounds[length_index], bounds[length_index + 1]
        size = length_index + 1
        if (stop - start) % size:
            raise KernelError(f"TfIdfVectorizer: the {size}-grams of the pool do not fill a whole number of {size}-grams")
        ngrams.extend(tuple(pool[i : i + size]) for i in range(start, stop, size))
    return ngrams


def _count_row(row: list, coordinates: dict[tuple, int], width: int, min_length: int, max_length: int,
               max_skip: int) -> np.ndarray:
    counts = np.zeros(width, dtype=np.float32)
    for size in range(max(min_length, 1), max_length + 1):
        skips = range(max_skip + 1) if size > 1 else range(1)
        for skip in skips:
            step = skip + 1
            span = (size - 1) * step
            for start in range(len(row) - span):
                coordinate = coordinates.get(tuple(row[start : start + span + 1 : step]))
                if coordinate is not None:
                    counts[coordinate] += 1
    return counts


@kernel("TfIdfVectorizer", since=9)
def TfIdfVectorizer(X, *, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts,
                    ngram_indexes, pool_int64s=None, pool_strings=None, weights=None):
    if (pool_int64s is None) == (pool_strings is None):
        raise KernelError("TfIdfVectorizer: exactly one of pool_int64s and pool_strings must be set")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise KernelError(f"TfIdfVectorizer: mode must be TF, IDF or TFIDF, got {mode!r}")
    X = np.asarray(X)
    if X.ndim not in (1, 2):
        raise KernelError(f"TfIdfVectorizer: X must be [C] or [N, C], got shape {X.shape}")
    if pool_strings is not None:
        pool, rows = list(pool_strings), as_text(X, "X")
    else:
        pool, rows = [int(v) for v in pool_int64s], X.astype(np.int64)
    ngrams = _pool_ngrams(pool, ngram_counts)
    if len(ngrams) != len(ngram_indexes):
        raise KernelError(f"TfIdfVectorizer: the pool has {len(ngrams)} n-grams but ngram_indexes {len(ngram_indexes)}")
    coordinates = {ngram: int(index) for ngram, index in zip(ngrams, ngram_indexes)}
    width = max(ngram_indexes) + 1 if len(ngram_indexes) else 0
    scale = np.ones(width, dtype=np.float32)
    if weights is not None:
        scale[np.asarray(ngram_indexes, dtype=np.int64)] = np.asarray(weights, dtype=np.float32)
    batch = rows.reshape(-1, X.shape[-1]) if X.ndim == 2 else rows.reshape(1, -1)
    output = np.stack([
        _count_row(row.tolist(), coordinates, width, min_gram_length, max_gram_length, max_skip_count)
        for row in batch
    ]) if batch.shape[0] else np.zeros((0, width), dtype=np.float32)
    if mode == "IDF":
        output = np.minimum(output, 1) * scale
    elif mode == "TFIDF":
        output = output * scale
    output = output.astype(np.float32)
    return output if X.ndim == 2 else output[0]
