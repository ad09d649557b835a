"""Sequence and optional kernels: lists of arrays in, lists out, inputs never modified."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from lite.errors import KernelError
from tests.lite.ops._checks_domains import normal, run_kernel
from tests.lite.ops._reference import one_node_model


def sequence(*shapes):
    return [normal(*shape) for shape in shapes]


def test_construct_length_and_at():
    items = sequence((2,), (3,), (4,))
    (built,) = run_kernel("SequenceConstruct", items, opset=11)
    assert isinstance(built, list) and [x.shape for x in built] == [(2,), (3,), (4,)]
    (length,) = run_kernel("SequenceLength", [built], opset=11)
    assert length.dtype == np.int64 and length.shape == () and int(length) == 3
    (last,) = run_kernel("SequenceAt", [built, np.array(-1)], opset=11)
    np.testing.assert_array_equal(last, items[2])
    with pytest.raises(KernelError, match="out of range"):
        run_kernel("SequenceAt", [built, np.array(3)], opset=11)


def test_empty_insert_erase_leave_the_input_alone():
    (empty,) = run_kernel("SequenceEmpty", [], {"dtype": 1}, opset=11)
    assert empty == []
    items = sequence((1,), (2,))
    extra = normal(5)
    (back,) = run_kernel("SequenceInsert", [items, extra], opset=11)
    (front,) = run_kernel("SequenceInsert", [items, extra, np.array(-2)], opset=11)
    (erased,) = run_kernel("SequenceErase", [items, np.array(0)], opset=11)
    (popped,) = run_kernel("SequenceErase", [items], opset=11)
    assert [x.shape for x in back] == [(1,), (2,), (5,)]
    assert [x.shape for x in front] == [(5,), (1,), (2,)]
    assert [x.shape for x in erased] == [(2,)] and [x.shape for x in popped] == [(1,)]
    assert len(items) == 2


def reference_split(inputs, attributes):
    model = one_node_model("SplitToSequence", inputs, attributes, 11)
    feeds = {f"in{i}": value for i, value in enumerate(inputs) if value is not None}
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("split,attributes", [
    (None, {"axis": 1}),
    (None, {"axis": 1, "keepdims": 0}),
    (np.array(2, dtype=np.int64), {"axis": 1}),
    (np.array([1, 4], dtype=np.int64), {"axis": -1}),
])
def test_split_to_sequence(split, attributes):
    x = normal(3, 5)
    inputs = [x] if split is None else [x, split]
    (pieces,) = run_kernel("SplitToSequence", inputs, attributes, opset=11)
    expected = reference_split(inputs, attributes)
    assert len(pieces) == len(expected)
    for got, want in zip(pieces, expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (0, 1), (-1, 1)])
def test_concat_from_sequence(axis, new_axis):
    items = sequence((2, 3), (2, 3))
    (result,) = run_kernel("ConcatFromSequence", [items], {"axis": axis, "new_axis": new_axis}, opset=11)
    expected = np.stack(items, axis=axis) if new_axis else np.concatenate(items, axis=axis)
    np.testing.assert_array_equal(result, expected)


def test_sequence_map_broadcasts_tensors_and_zips_sequences():
    def body(sample, offset, other):
        return [sample + offset + other, np.array(sample.shape, dtype=np.int64)]

    first, second = sequence((2,), (3,)), sequence((2,), (3,))
    offset = np.float32(1.0)
    sums, shapes = run_kernel("SequenceMap", [first, offset, second], {"body": body}, opset=17, output_count=2)
    for got, a, b in zip(sums, first, second):
        np.testing.assert_allclose(got, a + offset + b, rtol=1e-6)  # the body adds in that order
    assert [s.tolist() for s in shapes] == [[2], [3]]
    with pytest.raises(KernelError, match="samples"):
        run_kernel("SequenceMap", [first, sequence((1,))], {"body": body}, opset=17, output_count=2)


def test_optional_wrap_test_and_unwrap():
    x = normal(2)
    (wrapped,) = run_kernel("Optional", [x], {}, opset=15)
    (empty,) = run_kernel("Optional", [], {}, opset=15)
    assert wrapped is not None and empty is None
    assert bool(run_kernel("OptionalHasElement", [x], opset=18)[0]) is True
    assert bool(run_kernel("OptionalHasElement", [], opset=18)[0]) is False
    items = sequence((1,))
    (unwrapped,) = run_kernel("OptionalGetElement", [items], opset=18)
    assert unwrapped is items
    with pytest.raises(KernelError, match="empty"):
        run_kernel("OptionalGetElement", [None], opset=18)
