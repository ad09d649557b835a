"""Progress lines for calibration and evaluation (stderr; one updating line on a terminal)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

# progress(stage, done, total): the API accepts any such callable, or True for this printer.
ProgressCallback = Callable[[str, int, int], None]


class ProgressPrinter:
    """Prints ``stage: done/total samples`` at most every ``interval`` seconds, and at the end."""

    def __init__(self, stream: TextIO | None = None, interval: float = 0.5) -> None:
        self.stream = stream or sys.stderr
        self.interval = interval
        self._last = 0.0
        self._stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not finished and stage == self._stage and now - self._last < self.interval:
            return
        self._stage, self._last = stage, now
        terminal = getattr(self.stream, "isatty", lambda: False)()
        end = "\n" if finished or not terminal else ""
        prefix = "\r" if terminal else ""
        print(f"{prefix}{stage}: {done}/{total}", end=end, file=self.stream, flush=True)


def resolve(progress: bool | ProgressCallback | None) -> ProgressCallback:
    if progress is True:
        return ProgressPrinter()
    if callable(progress):
        return progress
    return lambda stage, done, total: None
