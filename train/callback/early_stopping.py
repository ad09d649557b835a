"""``EarlyStopping``: stop when a monitored value has not improved for ``patience`` epochs."""

from __future__ import annotations

import math

import numpy as np

from train.callback._callback import Callback, RunContext
from train.errors import TrainError


class EarlyStopping(Callback):
    """``mindspore.train.EarlyStopping(monitor='eval_loss', patience=0, mode='auto', min_delta=0,
    baseline=None, restore_best_weights=False)``.

    The monitored value is looked up at each epoch end in ``cb_params.eval_results`` (filled by
    ``Model.fit``; ``eval_loss`` is the evaluation loss), then in the training metrics; ``loss``
    is the epoch's mean training loss. ``mode='auto'`` minimizes names containing "loss".
    """

    def __init__(
        self,
        monitor: str = "eval_loss",
        patience: int = 0,
        verbose: bool = False,
        mode: str = "auto",
        min_delta: float = 0.0,
        baseline: float | None = None,
        restore_best_weights: bool = False,
    ) -> None:
        if mode not in ("auto", "min", "max"):
            raise TrainError(f"EarlyStopping: mode must be 'auto', 'min' or 'max', got {mode!r}")
        self.monitor, self.patience, self.verbose = monitor, patience, verbose
        self.minimize = mode == "min" or (mode == "auto" and "loss" in monitor)
        self.min_delta = abs(min_delta)
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.best = math.inf if self.minimize else -math.inf
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights: dict[str, np.ndarray] | None = None

    def _current(self, run_context: RunContext) -> float:
        params = run_context.original_args()
        if self.monitor == "loss":
            return params.epoch_loss
        if self.monitor == "eval_loss" and "loss" in params.eval_results:
            return params.eval_results["loss"]
        for source in (params.eval_results, params.train_metrics):
            if self.monitor in source:
                return source[self.monitor]
        raise TrainError(
            f"EarlyStopping: monitor {self.monitor!r} not found; available: 'loss', "
            f"{sorted(params.eval_results) + sorted(params.train_metrics)} (eval needs Model.fit)"
        )

    def _improved(self, value: float) -> bool:
        if self.minimize:
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        value = self._current(run_context)
        baseline_ok = self.baseline is None or (
            value < self.baseline if self.minimize else value > self.baseline
        )
        if self._improved(value) and baseline_ok:
            self.best = value
            self.wait = 0
            if self.restore_best_weights:
                self.best_weights = {p.name: p.data.copy() for p in params.train_network.get_parameters()}
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = params.cur_epoch_num
            if self.verbose:
                print(
                    f"EarlyStopping: {self.monitor} did not improve for {self.wait} epochs; stopping at "
                    f"epoch {self.stopped_epoch}"
                )
            run_context.request_stop()

    def on_train_end(self, run_context: RunContext) -> None:
        if self.restore_best_weights and self.best_weights is not None:
            for param in run_context.original_args().train_network.get_parameters():
                param.set_data(self.best_weights[param.name])
