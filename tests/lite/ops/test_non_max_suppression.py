"""NonMaxSuppression against a per-box greedy reference and ONNX Runtime.

Boxes sit on a small integer grid and scores take a few values, so many pairs overlap, many IoUs land
exactly on the thresholds and many scores tie: the cases where selection order and the exact
comparison decide the output. Both internal strategies (the sparse overlap list and the block
fallback for pile-ups) run, with chunks small enough that every chunk loop turns several times.
"""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import non_max_suppression
from tests.lite.ops._reference import check_against_onnxruntime, kernel_outputs

rng = np.random.default_rng(17)


def _reference_iou_exceeds(box, other, center_point_box, iou_threshold):
    """ONNX Runtime's SuppressByIOU for one pair, on float32 scalars (halved by a float32 two: numpy 1.x
    makes ``float32 / 2`` a float64)."""
    two = np.float32(2)
    if center_point_box:
        x, y, w, h = box[0], box[1], box[2] / two, box[3] / two
        ox, oy, ow, oh = other[0], other[1], other[2] / two, other[3] / two
        lo, hi, olo, ohi = (y - h, x - w), (y + h, x + w), (oy - oh, ox - ow), (oy + oh, ox + ow)
    else:
        lo, hi = (min(box[0], box[2]), min(box[1], box[3])), (max(box[0], box[2]), max(box[1], box[3]))
        olo = (min(other[0], other[2]), min(other[1], other[3]))
        ohi = (max(other[0], other[2]), max(other[1], other[3]))
    height = min(hi[0], ohi[0]) - max(lo[0], olo[0])
    width = min(hi[1], ohi[1]) - max(lo[1], olo[1])
    if width <= 0 or height <= 0 or width * height <= 0:
        return False
    inter = width * height
    area, other_area = (hi[1] - lo[1]) * (hi[0] - lo[0]), (ohi[1] - olo[1]) * (ohi[0] - olo[0])
    union = area + other_area - inter
    if area <= 0 or other_area <= 0 or union <= 0:
        return False
    return inter / union > iou_threshold


def _reference_nms(boxes, scores, limit, iou_threshold, score_threshold, center_point_box):
    """The spec's algorithm one box at a time: visit by descending score (ties: lower index)."""
    selected = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            order = sorted(range(scores.shape[2]), key=lambda i: (-scores[b, c, i], i))
            if score_threshold is not None:
                order = [i for i in order if scores[b, c, i] > score_threshold]
            kept = []
            for i in order:
                if len(kept) == limit:
                    break
                if not any(
                    _reference_iou_exceeds(boxes[b, i], boxes[b, k], center_point_box, iou_threshold)
                    for k in kept
                ):
                    kept.append(i)
            selected += [[b, c, i] for i in kept]
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


def _grid_boxes(batches, count, grid):
    corners = rng.integers(0, grid, size=(batches, count, 2))
    sizes = rng.integers(0, 5, size=(batches, count, 2))
    boxes = np.concatenate([corners, corners + sizes], axis=-1)
    flip = rng.random((batches, count)) < 0.3  # the other diagonal, for the corner format
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("strategy", ["sparse", "blocks"])
@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize(
    "count, limit, iou_threshold, score_threshold",
    [(60, 1000, 0.5, None), (60, 4, 0.3, 0.25), (200, 25, 0.7, None), (200, 1000, 1 / 3, 0.5), (0, 5, 0.5, None),
     (7, 0, 0.5, None), (9, 3, 0.0, 0.99)],
)
def test_matches_reference_and_onnxruntime(
    monkeypatch, strategy, center_point_box, count, limit, iou_threshold, score_threshold
):
    monkeypatch.setattr(non_max_suppression, "_PAIRS_PER_BOX", 10**9 if strategy == "sparse" else 0)
    monkeypatch.setattr(non_max_suppression, "_PAIR_CHUNK", 37)
    monkeypatch.setattr(non_max_suppression, "_BLOCK", 16)
    boxes = _grid_boxes(2, count, grid=12)
    scores = (rng.integers(0, 6, size=(2, 3, count)) / 6).astype(np.float32)
    inputs = [
        boxes, scores, np.array([limit], np.int64), np.array([iou_threshold], np.float32),
        None if score_threshold is None else np.array([score_threshold], np.float32),
    ]
    attributes = {"center_point_box": center_point_box}
    threshold = np.float32(iou_threshold)
    floor = None if score_threshold is None else np.float32(score_threshold)
    expected = _reference_nms(boxes, scores, limit, threshold, floor, center_point_box)
    (actual,) = kernel_outputs("NonMaxSuppression", inputs, attributes, opset=11)
    np.testing.assert_array_equal(actual, expected)
    check_against_onnxruntime("NonMaxSuppression", inputs, attributes, opset=11)


def test_iou_exactly_at_a_float32_threshold_does_not_suppress():
    # IoU 7/10 is 0.7 in float32, equal to the float32 threshold: not '>', so both boxes stay (in float64
    # 0.7 exceeds float32(0.7) = 0.69999998 and the second box would be dropped).
    boxes = np.array([[[0, 0, 1, 10], [0, 0, 1, 7]]], np.float32)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    inputs = [boxes, scores, np.array([10], np.int64), np.array([0.7], np.float32)]
    (actual,) = check_against_onnxruntime("NonMaxSuppression", inputs, opset=11)
    np.testing.assert_array_equal(actual, [[0, 0, 0], [0, 0, 1]])


def test_pile_up_of_many_boxes_keeps_one():
    # Thousands of near-identical boxes: the case the block fallback exists for.
    boxes = (np.array([10, 10, 60, 60], np.float32) + rng.uniform(-1, 1, size=(1, 5000, 4))).astype(np.float32)
    scores = rng.uniform(0, 1, size=(1, 1, 5000)).astype(np.float32)
    inputs = [boxes, scores, np.array([100], np.int64), np.array([0.5], np.float32)]
    (actual,) = check_against_onnxruntime("NonMaxSuppression", inputs, opset=11)
    np.testing.assert_array_equal(actual, [[0, 0, int(np.argmax(scores))]])
