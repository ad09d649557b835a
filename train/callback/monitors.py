"""Console callbacks: ``LossMonitor``, ``TimeMonitor`` and the default ``ProgressBar``."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from train.callback._callback import Callback, RunContext
from train.errors import TrainError


class LossMonitor(Callback):
    """Print ``epoch: E step: S, loss is L`` every ``per_print_times`` steps; stop on NaN/inf loss."""

    def __init__(self, per_print_times: int = 1, stream: TextIO | None = None) -> None:
        if per_print_times < 0:
            raise TrainError(f"LossMonitor: per_print_times must be >= 0, got {per_print_times}")
        self.per_print_times = per_print_times
        self.stream = stream
        self.losses: list[float] = []

    def on_train_step_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        loss = float(params.net_outputs.asnumpy().mean())
        self.losses.append(loss)
        if not math.isfinite(loss):
            raise TrainError(
                f"epoch {params.cur_epoch_num} step {params.cur_step_in_epoch}: loss is {loss}; "
                "lower the learning rate or check the inputs"
            )
        if self.per_print_times and params.cur_step_num % self.per_print_times == 0:
            print(
                f"epoch: {params.cur_epoch_num} step: {params.cur_step_in_epoch}, loss is {loss:.6f}",
                file=self.stream or sys.stdout,
            )


class TimeMonitor(Callback):
    """Print each epoch's time and mean step time (``TimeMonitor(data_size=None)``)."""

    def __init__(self, data_size: int | None = None, stream: TextIO | None = None) -> None:
        self.data_size = data_size
        self.stream = stream
        self.epoch_times: list[float] = []
        self._start = 0.0

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        elapsed = time.perf_counter() - self._start
        self.epoch_times.append(elapsed)
        steps = self.data_size or run_context.original_args().batch_num or 1
        print(
            f"epoch time: {elapsed * 1e3:.1f} ms, per step time: {elapsed * 1e3 / steps:.3f} ms",
            file=self.stream or sys.stdout,
        )


class ProgressBar(Callback):
    """A one-line text progress bar per epoch on stderr (no dependency); tqdm draws it instead when
    installed and the stream is a terminal (``use_tqdm=None``), or when ``use_tqdm=True``.

    Model.train adds it by default (``progress_bar=False`` turns it off).
    """

    def __init__(self, width: int = 30, stream: TextIO | None = None, use_tqdm: bool | None = None) -> None:
        self.width = width
        self.stream = stream
        self.use_tqdm = use_tqdm
        self._bar: Any = None
        self._start = 0.0

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        self._start = time.perf_counter()
        stream = self.stream or sys.stderr
        wanted = self.use_tqdm if self.use_tqdm is not None else hasattr(stream, "isatty") and stream.isatty()
        if wanted:
            try:
                from tqdm import tqdm
            except ImportError:
                self.use_tqdm = False
            else:
                params = run_context.original_args()
                self._bar = tqdm(
                    total=params.batch_num,
                    desc=f"epoch {params.cur_epoch_num}/{params.epoch_num}",
                    file=stream,
                    leave=True,
                )

    def on_train_step_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        loss = float(params.net_outputs.asnumpy().mean())
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.4f}")
            return
        stream = self.stream or sys.stderr
        interactive = hasattr(stream, "isatty") and stream.isatty()
        done, total = params.cur_step_in_epoch, max(params.batch_num, 1)
        if interactive or done == total:
            filled = int(self.width * done / total)
            bar = "#" * filled + "." * (self.width - filled)
            line = (
                f"epoch {params.cur_epoch_num}/{params.epoch_num} [{bar}] {done}/{total} "
                f"loss {loss:.4f} {time.perf_counter() - self._start:.1f}s"
            )
            stream.write(("\r" if interactive else "") + line + ("\n" if done == total else ""))
            stream.flush()

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
