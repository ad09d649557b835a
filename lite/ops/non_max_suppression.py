"""NonMaxSuppression: greedy per-class box selection by score, suppressing heavy overlaps.

https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html

Per batch and class: boxes scoring above ``score_threshold`` are visited in descending score
order; each one kept suppresses the later ones whose IoU with it exceeds ``iou_threshold``;
at most ``max_output_boxes_per_class`` are kept. Output rows are ``[batch, class, box]``.
Boxes are ``[y1, x1, y2, x2]`` (either diagonal) or, with ``center_point_box=1``,
``[x_center, y_center, width, height]``.
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


def _corners(boxes, center_point_box):
    boxes = np.asarray(boxes, dtype=np.float64)
    if center_point_box:
        x, y, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=-1)
    y_lo = np.minimum(boxes[..., 0], boxes[..., 2])
    y_hi = np.maximum(boxes[..., 0], boxes[..., 2])
    x_lo = np.minimum(boxes[..., 1], boxes[..., 3])
    x_hi = np.maximum(boxes[..., 1], boxes[..., 3])
    return np.stack([y_lo, x_lo, y_hi, x_hi], axis=-1)


def _iou(box, others):
    top = np.maximum(box[0], others[:, 0])
    left = np.maximum(box[1], others[:, 1])
    bottom = np.minimum(box[2], others[:, 2])
    right = np.minimum(box[3], others[:, 3])
    inter = np.clip(bottom - top, 0, None) * np.clip(right - left, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((area > 0) & (areas > 0) & (union > 0), inter / union, 0.0)


@kernel("NonMaxSuppression", since=10)
def NonMaxSuppression(
    boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None, *, center_point_box=0
):
    limit = 0 if max_output_boxes_per_class is None else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    iou_limit = 0.0 if iou_threshold is None else float(np.asarray(iou_threshold).reshape(-1)[0])
    floor = None if score_threshold is None else float(np.asarray(score_threshold).reshape(-1)[0])
    corners = _corners(boxes, center_point_box)
    scores = np.asarray(scores)
    selected = []
    if limit > 0:
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                class_scores = scores[b, c]
                candidates = np.arange(class_scores.shape[0])
                if floor is not None:
                    candidates = candidates[class_scores > floor]
                # Descending score; ties keep the lower box index first.
                order = candidates[np.argsort(-class_scores[candidates], kind="stable")]
                kept: list[int] = []
                while order.size and len(kept) < limit:
                    best = order[0]
                    kept.append(int(best))
                    rest = order[1:]
                    order = rest[_iou(corners[b, best], corners[b, rest]) <= iou_limit]
                selected.extend([b, c, box] for box in kept)
    return np.array(selected, dtype=np.int64).reshape(-1, 3)
