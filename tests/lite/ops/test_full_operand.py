"""lite.ops._helpers.full_operand: a constant broadcast to a full shape, laid out in C order."""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import FULL_OPERAND_BYTES, full_operand


def test_row_and_column_operands_are_copied_out_in_c_order():
    rng = np.random.default_rng(0)
    for operand, shape in [(rng.standard_normal(7).astype(np.float32), (5, 7)),
                           (rng.standard_normal((6, 1)).astype(np.float32), (2, 6, 9))]:
        full = full_operand(operand, shape)
        assert full.shape == shape
        # A broadcast copied in its own stride order would be strided (the repeated axis innermost).
        assert full.flags.c_contiguous
        assert not full.flags.writeable
        np.testing.assert_array_equal(full, np.broadcast_to(operand, shape))


def test_large_operands_are_left_as_they_are():
    operand = np.ones(4, np.float32)
    shape = (FULL_OPERAND_BYTES // 16 + 1, 4)
    assert full_operand(operand, shape) is operand
