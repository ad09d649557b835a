"""When a busy machine's runs split large products (lite.ops._blas): only where the other
processes' runnable tasks leave this process a second core."""

from __future__ import annotations

import pytest

from lite.ops import _blas as blas
from lite.ops._blas import ONE_BLAS_THREAD


@pytest.mark.parametrize("others, cores, busy, split", [(0, 2, False, False), (1, 2, True, False), (5, 2, True, False),
                                                        (1, 8, True, True), (6, 8, True, True), (7, 8, True, False),
                                                        (None, 2, True, True)])
def test_a_run_splits_only_with_a_core_to_spare(monkeypatch, others, cores, busy, split):
    monkeypatch.setattr(blas, "_others", lambda: others)
    monkeypatch.setattr(blas, "_cores", lambda: cores)
    assert blas.others_running() is busy
    with ONE_BLAS_THREAD:
        assert ONE_BLAS_THREAD.split is split
        if busy and ONE_BLAS_THREAD.threads() is not None:
            assert ONE_BLAS_THREAD.threads() == 1
    assert ONE_BLAS_THREAD.split is False


def test_the_count_of_other_tasks_is_read_from_the_kernel():
    others = blas._others()
    assert others is None or others >= 0
    assert blas.spare_core() in (True, False)
