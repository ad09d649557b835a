"""Callback protocol (``mindspore.train.Callback``, ``RunContext``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CallbackParams:
    """What callbacks can read during training (MindSpore's ``cb_params``)."""

    train_network: Any = None
    optimizer: Any = None
    loss_fn: Any = None
    epoch_num: int = 0
    batch_num: int = 0
    cur_epoch_num: int = 0
    cur_step_num: int = 0  # global step, 1-based after the first step
    cur_step_in_epoch: int = 0
    batch_size: int = 0
    net_outputs: Any = None  # the loss Tensor of the last step
    learning_rate: float = 0.0
    train_metrics: dict[str, float] = field(default_factory=dict)
    epoch_loss: float = float("nan")
    eval_results: dict[str, float] = field(default_factory=dict)


class RunContext:
    def __init__(self, cb_params: CallbackParams) -> None:
        self._params = cb_params
        self._stop = False

    def original_args(self) -> CallbackParams:
        return self._params

    def request_stop(self) -> None:
        """Finish after the current step (``EarlyStopping`` uses this)."""
        self._stop = True

    def get_stop_requested(self) -> bool:
        return self._stop


class Callback:
    """Override the hooks you need; each gets the :class:`RunContext`."""

    def on_train_begin(self, run_context: RunContext) -> None: ...

    def on_train_epoch_begin(self, run_context: RunContext) -> None: ...

    def on_train_step_begin(self, run_context: RunContext) -> None: ...

    def on_train_step_end(self, run_context: RunContext) -> None: ...

    def on_train_epoch_end(self, run_context: RunContext) -> None: ...

    def on_train_end(self, run_context: RunContext) -> None: ...

    def on_eval_end(self, run_context: RunContext) -> None: ...


class CallbackList(Callback):
    def __init__(self, callbacks: list[Callback]) -> None:
        self.callbacks = callbacks

    def _each(self, hook: str, run_context: RunContext) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(run_context)

    def on_train_begin(self, run_context: RunContext) -> None:
        self._each("on_train_begin", run_context)

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        self._each("on_train_epoch_begin", run_context)

    def on_train_step_begin(self, run_context: RunContext) -> None:
        self._each("on_train_step_begin", run_context)

    def on_train_step_end(self, run_context: RunContext) -> None:
        self._each("on_train_step_end", run_context)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        self._each("on_train_epoch_end", run_context)

    def on_train_end(self, run_context: RunContext) -> None:
        self._each("on_train_end", run_context)

    def on_eval_end(self, run_context: RunContext) -> None:
        self._each("on_eval_end", run_context)
