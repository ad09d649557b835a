"""NonMaxSuppression: greedy per-class box selection by score, suppressing heavy overlaps.

https://onnx.ai/onnx/operators/onnx__NonMaxSuppression.html

Per batch and class: boxes scoring above ``score_threshold`` are visited in descending score
order (ties: lower box index first); each one kept suppresses the later ones whose IoU with it
exceeds ``iou_threshold``; at most ``max_output_boxes_per_class`` are kept. Output rows are
``[batch, class, box]``. Boxes are ``[y1, x1, y2, x2]`` (either diagonal) or, with
``center_point_box=1``, ``[x_center, y_center, width, height]``.

IoU is computed in the boxes' precision (float32 for ONNX models) with ONNX Runtime's operation
order and rules, so decisions on pairs whose IoU sits exactly at the threshold agree with it: a
pair suppresses only if it intersects, both boxes have positive area and the IoU is ``>`` the
threshold.

Rather than comparing every candidate with every kept box, the kernel first finds the pairs that
overlap at all with a sort-and-sweep along one axis, tests only those, and then runs the greedy
pass over that sparse list. When boxes pile up so much that the overlapping pairs would be too
many to hold, it falls back to suppressing block by block from the kept boxes' side, which is cheap
exactly then because few boxes survive a pile-up.
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel

# Box pairs tested at once (by the sweep and by the fallback): the temporaries stay a few arrays of
# this many elements whatever the number of boxes.
_PAIR_CHUNK = 1 << 18
# Candidates the fallback resolves among themselves at once (a _BLOCK x _BLOCK IoU matrix).
_BLOCK = 256
# Above this many axis-overlapping pairs per box, the sparse list would approach N x N.
_PAIRS_PER_BOX = 64


def _corners(boxes, center_point_box):
    dtype = np.float64 if np.asarray(boxes).dtype == np.float64 else np.float32
    boxes = np.asarray(boxes, dtype=dtype)
    if center_point_box:
        # Not normalised, as in ONNX Runtime: a negative width or height makes a box that never overlaps.
        x, y, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2] / 2, boxes[..., 3] / 2
        return np.stack([y - h, x - w, y + h, x + w], axis=-1)
    y_lo = np.minimum(boxes[..., 0], boxes[..., 2])
    y_hi = np.maximum(boxes[..., 0], boxes[..., 2])
    x_lo = np.minimum(boxes[..., 1], boxes[..., 3])
    x_hi = np.maximum(boxes[..., 1], boxes[..., 3])
    return np.stack([y_lo, x_lo, y_hi, x_hi], axis=-1)


def _suppresses(a, area_a, b, area_b, iou_limit):
    """Elementwise (broadcasting) whether boxes ``a`` and ``b`` overlap with IoU > ``iou_limit``."""
    height = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])
    width = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])
    inter = width * height
    union = area_a + area_b - inter
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iou = inter / union
    valid = (width > 0) & (height > 0) & (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
    return valid & (iou > iou_limit)


def _ranked(class_scores, floor):
    """Box indices above the score floor, by descending score; ties keep the lower index first."""
    candidates = np.arange(class_scores.shape[0])
    if floor is not None:
        candidates = candidates[class_scores > floor]
    return candidates[np.argsort(-class_scores[candidates], kind="stable")]


def _axis_sweep(boxes):
    """Sort along the axis where fewer boxes overlap; returns (order, partners per sorted box).

    Box ``order[p]`` may overlap only boxes ``order[p + 1 : p + 1 + partners[p]]`` among those after
    it: the ones starting before it ends. Every overlapping pair appears exactly once.
    """
    best = None
    for lo, hi in ((boxes[:, 1], boxes[:, 3]), (boxes[:, 0], boxes[:, 2])):
        order = np.argsort(lo, kind="stable")
        ends = np.searchsorted(lo[order], hi[order], side="left")
        partners = np.maximum(ends - np.arange(1, lo.size + 1), 0)
        if best is None or partners.sum() < best[1].sum():
            best = order, partners
    return best


def _overlapping_pairs(boxes, areas, iou_limit, order, partners):
    """Rank pairs (earlier, later) whose IoU exceeds the limit, tested ``_PAIR_CHUNK`` at a time."""
    reach = np.cumsum(partners)
    earlier, later = [], []
    start = 0
    while start < partners.size:
        done = reach[start - 1] if start else 0
        stop = max(int(np.searchsorted(reach, done + _PAIR_CHUNK, side="right")), start + 1)
        counts = partners[start:stop]
        first = np.repeat(np.arange(start, stop), counts)
        offsets = np.arange(first.size) - np.repeat(np.cumsum(counts) - counts, counts)
        a, b = order[first], order[first + 1 + offsets]
        hit = _suppresses(boxes[a], areas[a], boxes[b], areas[b], iou_limit)
        earlier.append(np.minimum(a, b)[hit])
        later.append(np.maximum(a, b)[hit])
        start = stop
    return np.concatenate(earlier), np.concatenate(later)


def _greedy_sparse(count, earlier, later, limit):
    """The greedy pass over candidates ``0..count-1`` given every suppressing pair."""
    by_source = np.argsort(earlier, kind="stable")
    targets = later[by_source]
    bounds = np.searchsorted(earlier[by_source], np.arange(count + 1)).tolist()
    suppressed = np.zeros(count, dtype=bool)
    kept: list[int] = []
    for rank in range(count):
        if suppressed[rank]:
            continue
        kept.append(rank)
        if len(kept) == limit:
            break
        if bounds[rank] != bounds[rank + 1]:
            suppressed[targets[bounds[rank] : bounds[rank + 1]]] = True
    return np.array(kept, dtype=np.int64)


def _resolve_block(boxes, areas, block, iou_limit):
    """Greedy selection inside one block of still-alive candidates (ranks in score order)."""
    b, area = boxes[block], areas[block]
    clash = _suppresses(b[:, None], area[:, None], b[None], area[None], iou_limit)
    alive = np.ones(block.size, dtype=bool)
    for i in range(block.size):
        if alive[i]:
            alive[i + 1 :] &= ~clash[i, i + 1 :]
    return block[alive]


def _greedy_blocks(boxes, areas, iou_limit, limit):
    """The greedy pass by blocks: each block's winners remove what they suppress from the rest."""
    remaining = np.arange(boxes.shape[0])
    kept = []
    total = 0
    while remaining.size and total < limit:
        block, remaining = remaining[:_BLOCK], remaining[_BLOCK:]
        winners = _resolve_block(boxes, areas, block, iou_limit)[: limit - total]
        kept.append(winners)
        total += winners.size
        remaining = _survivors(boxes, areas, winners, remaining, iou_limit)
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


def _survivors(boxes, areas, winners, remaining, iou_limit):
    """The ``remaining`` candidates no winner suppresses, tested ``_PAIR_CHUNK`` pairs at a time."""
    win_boxes, win_areas = boxes[winners][:, None], areas[winners][:, None]
    step = max(_PAIR_CHUNK // winners.size, 1)
    survivors = [remaining[:0]]
    for start in range(0, remaining.size, step):
        rest = remaining[start : start + step]
        hit = _suppresses(win_boxes, win_areas, boxes[rest][None], areas[rest][None], iou_limit)
        survivors.append(rest[~hit.any(axis=0)])
    return np.concatenate(survivors)


def _select(corners, class_scores, limit, iou_limit, floor):
    """Kept box indices of one batch and class, in selection order."""
    ranked = _ranked(class_scores, floor)
    if ranked.size == 0:
        return ranked
    boxes = corners[ranked]
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    order, partners = _axis_sweep(boxes)
    if partners.sum() > _PAIRS_PER_BOX * ranked.size:
        return ranked[_greedy_blocks(boxes, areas, iou_limit, limit)]
    earlier, later = _overlapping_pairs(boxes, areas, iou_limit, order, partners)
    return ranked[_greedy_sparse(ranked.size, earlier, later, limit)]


@kernel("NonMaxSuppression", since=10)
def NonMaxSuppression(
    boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None, *, center_point_box=0
):
    limit = 0 if max_output_boxes_per_class is None else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    corners = _corners(boxes, center_point_box)
    iou_limit = corners.dtype.type(0.0 if iou_threshold is None else np.asarray(iou_threshold).reshape(-1)[0])
    floor = None if score_threshold is None else float(np.asarray(score_threshold).reshape(-1)[0])
    scores = np.asarray(scores)
    selected = []
    if limit > 0:
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                kept = _select(corners[b], scores[b, c], limit, iou_limit, floor)
                selected.append(np.stack([np.full_like(kept, b), np.full_like(kept, c), kept], axis=1))
    return np.concatenate(selected).astype(np.int64) if selected else np.zeros((0, 3), dtype=np.int64)
