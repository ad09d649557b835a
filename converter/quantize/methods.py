"""Calibration methods: from a tensor's observed values to the range [low, high] to quantize.

``minmax``      the observed minimum and maximum (TFLite's representative dataset; ONNX Runtime
                ``MinMax``; MindSpore Lite ``MAX_MIN``).
``percentile``  drops the extreme ``100 - p`` percent of values on each side (ONNX Runtime
                ``Percentile``; MindSpore Lite ``REMOVAL_OUTLIER``).
``entropy``     the clipping threshold minimising the KL divergence between the observed
                distribution and its 8-bit quantized form (the TensorRT calibration procedure;
                ONNX Runtime ``Entropy``; MindSpore Lite ``KL``).

Each method is ``method(stats, config) -> (low, high)`` over :class:`TensorStats`; the table
``METHODS`` is keyed by the ``--calib-method`` name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from converter.quantize.config import QuantConfig
from converter.quantize.histogram import StreamingHistogram


@dataclass
class TensorStats:
    """What calibration observed of one tensor."""

    low: float = np.inf
    high: float = -np.inf
    histogram: StreamingHistogram | None = field(default=None)

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.low = min(self.low, float(np.min(values)))
        self.high = max(self.high, float(np.max(values)))
        if self.histogram is not None:
            self.histogram.add(values)

    @property
    def seen(self) -> bool:
        return self.low <= self.high


def minmax(stats: TensorStats, config: QuantConfig) -> tuple[float, float]:
    return stats.low, stats.high


def percentile(stats: TensorStats, config: QuantConfig) -> tuple[float, float]:
    histogram = stats.histogram
    if histogram is None or histogram.total == 0:
        return minmax(stats, config)
    cumulative = np.cumsum(histogram.counts) / histogram.total
    edges = histogram.edges()
    tail = (100.0 - config.percentile) / 100.0
    low_bin = int(np.searchsorted(cumulative, tail, side="left"))
    high_bin = int(np.searchsorted(cumulative, 1.0 - tail, side="left"))
    low = max(stats.low, float(edges[low_bin]))
    high = min(stats.high, float(edges[min(high_bin + 1, edges.size - 1)]))
    return low, high


def entropy(stats: TensorStats, config: QuantConfig) -> tuple[float, float]:
    """KL-optimal threshold on |x| (TensorRT's method), applied to the side(s) the tensor has."""
    histogram = stats.histogram
    if histogram is None or histogram.total == 0:
        return minmax(stats, config)
    magnitudes = _fold_to_magnitudes(histogram)
    levels = 256 if stats.low >= 0.0 else 128  # one-sided tensors use all 8-bit levels
    threshold_bin = _kl_threshold(magnitudes, levels)
    threshold = (threshold_bin + 1) * histogram.width
    low = max(stats.low, -threshold)
    high = min(stats.high, threshold)
    return low, high


def _fold_to_magnitudes(histogram: StreamingHistogram) -> np.ndarray:
    """Counts of |x| per bin [k w, (k+1) w): bin -1-k of x folds onto bin k (exact, bins anchored at 0)."""
    first, counts = histogram.first, histogram.counts
    last = first + counts.size - 1
    size = max(last + 1, -first, 1)
    folded = np.zeros(size, np.int64)
    for offset, count in enumerate(counts):
        k = first + offset
        folded[k if k >= 0 else -1 - k] += count
    return folded


def _kl_threshold(counts: np.ndarray, levels: int) -> int:
    """Index of the last bin kept: minimises KL(P || Q) over thresholds (TensorRT 8-bit calibration)."""
    counts = counts.astype(np.float64)
    if counts.size <= levels:
        return counts.size - 1
    best, best_kl = counts.size - 1, np.inf
    stride = max(1, (counts.size - levels) // 256)  # at most ~256 candidate thresholds
    for end in range(levels, counts.size + 1, stride):
        reference = counts[:end].copy()
        reference[end - 1] += counts[end:].sum()  # clipped outliers pile up in the last bin
        if reference.sum() == 0:
            continue
        kept = counts[:end]
        groups = (np.arange(end) * levels) // end  # ``levels`` groups of consecutive bins
        nonzero = kept > 0
        group_sum = np.bincount(groups, weights=kept, minlength=levels)
        group_nonzero = np.bincount(groups, weights=nonzero, minlength=levels)
        expanded = np.where(nonzero, group_sum[groups] / np.maximum(group_nonzero[groups], 1), 0.0)
        p = reference / reference.sum()
        q_total = expanded.sum()
        if q_total == 0:
            continue
        q = expanded / q_total
        mask = p > 0
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if kl < best_kl:
            best, best_kl = end - 1, kl
    return best


CalibrationMethod = Callable[[TensorStats, QuantConfig], tuple[float, float]]

METHODS: dict[str, CalibrationMethod] = {
    "minmax": minmax,
    "percentile": percentile,
    "entropy": entropy,
}


def needs_histogram(name: str) -> bool:
    return name != "minmax"
