"""A streaming histogram whose bins merge exactly as the range grows.

Bins have width ``width`` and are anchored at 0: bin ``k`` counts values in
``[k * width, (k + 1) * width)``. When new values fall outside the covered bins the bin list
grows; past ``max_bins`` the width doubles and neighbouring bins (``2j``, ``2j + 1``) merge, which
is exact because the bins stay anchored at 0. So the histogram of a stream never depends on how
the stream was cut into batches beyond the final width, and memory stays bounded.
"""

from __future__ import annotations

import numpy as np


class StreamingHistogram:
    def __init__(self, max_bins: int = 4096, initial_bins: int = 2048) -> None:
        self.max_bins = max_bins
        self.initial_bins = initial_bins
        self.width = 0.0
        self.first = 0  # index of counts[0]
        self.counts = np.zeros(0, np.int64)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        values = values[np.isfinite(values)]
        if values.size == 0:
            return
        low, high = float(values.min()), float(values.max())
        if self.width == 0.0:
            span = max(abs(low), abs(high))
            if span == 0.0:
                span = 1e-8
            self.width = span / (self.initial_bins / 2)
        bins = np.floor(values / self.width).astype(np.int64)
        first, last = int(bins.min()), int(bins.max())
        while self.counts.size and (max(last, self.first + self.counts.size - 1) - min(first, self.first) + 1 > self.max_bins):
            self._coarsen()
            bins = np.floor(values / self.width).astype(np.int64)
            first, last = int(bins.min()), int(bins.max())
        while not self.counts.size and last - first + 1 > self.max_bins:
            self.width *= 2.0
            bins = np.floor(values / self.width).astype(np.int64)
            first, last = int(bins.min()), int(bins.max())
        self._cover(first, last)
        self.counts += np.bincount(bins - self.first, minlength=self.counts.size)

    def _cover(self, first: int, last: int) -> None:
        if not self.counts.size:
            self.first = first
            self.counts = np.zeros(last - first + 1, np.int64)
            return
        low = min(first, self.first)
        high = max(last, self.first + self.counts.size - 1)
        if low == self.first and high == self.first + self.counts.size - 1:
            return
        grown = np.zeros(high - low + 1, np.int64)
        grown[self.first - low:self.first - low + self.counts.size] = self.counts
        self.first, self.counts = low, grown

    def _coarsen(self) -> None:
        """Double the width: bin k goes to floor(k / 2)."""
        start = self.first - (self.first % 2)  # even start so pairs align with the new bins
        padded = np.zeros(self.first - start + self.counts.size + 1, np.int64)
        padded[self.first - start:self.first - start + self.counts.size] = self.counts
        if padded.size % 2:
            padded = padded[:-1]
        self.counts = padded.reshape(-1, 2).sum(axis=1)
        self.first = start // 2
        self.width *= 2.0

    def edges(self) -> np.ndarray:
        """Bin edges (``len(counts) + 1`` values)."""
        return (self.first + np.arange(self.counts.size + 1)) * self.width
