"""``ModelCheckpoint`` + ``CheckpointConfig``: periodic .ckpt files, oldest deleted beyond a maximum."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from train.callback._callback import Callback, RunContext
from train.checkpoint import save_checkpoint
from train.errors import TrainError


class CheckpointConfig:
    """When and what to save (``mindspore.train.CheckpointConfig`` names and defaults).

    ``append_info`` is a list of ``"epoch_num"``, ``"step_num"`` and/or dicts of extra entries.
    The optimizer state (``moments.*``, ``global_step``, ...) is saved with the network, as
    MindSpore does when it saves the ``TrainOneStepCell``; ``save_optimizer=False`` leaves it out.
    """

    def __init__(
        self,
        save_checkpoint_steps: int = 1,
        save_checkpoint_seconds: int = 0,
        keep_checkpoint_max: int = 5,
        append_info: list[Any] | None = None,
        crc_check: bool = False,
        saved_network: Any = None,
        save_optimizer: bool = True,
    ) -> None:
        if save_checkpoint_steps <= 0 and save_checkpoint_seconds <= 0:
            raise TrainError("CheckpointConfig: set save_checkpoint_steps or save_checkpoint_seconds > 0")
        if keep_checkpoint_max < 1:
            raise TrainError(f"CheckpointConfig: keep_checkpoint_max must be >= 1, got {keep_checkpoint_max}")
        self.save_checkpoint_steps = save_checkpoint_steps
        self.save_checkpoint_seconds = save_checkpoint_seconds
        self.keep_checkpoint_max = keep_checkpoint_max
        self.append_info = append_info or []
        self.crc_check = crc_check
        self.saved_network = saved_network
        self.save_optimizer = save_optimizer


class ModelCheckpoint(Callback):
    """Save ``<directory>/<prefix>-<epoch>_<step in epoch>.ckpt`` per the config."""

    def __init__(
        self,
        prefix: str = "CKP",
        directory: str | os.PathLike | None = None,
        config: CheckpointConfig | None = None,
    ) -> None:
        self.prefix = prefix
        self.directory = Path(directory) if directory is not None else Path.cwd()
        self.config = config or CheckpointConfig()
        self.saved: list[Path] = []
        self.latest_ckpt_file_name: Path | None = None
        self._last_step = -1
        self._last_time = time.monotonic()

    def on_train_step_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        config = self.config
        by_steps = (
            config.save_checkpoint_steps > 0 and params.cur_step_num % config.save_checkpoint_steps == 0
        )
        by_time = (
            config.save_checkpoint_seconds > 0
            and time.monotonic() - self._last_time >= config.save_checkpoint_seconds
        )
        if by_steps or by_time:
            self._save(params)

    def on_train_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        if params.cur_step_num != self._last_step:
            self._save(params)

    def _save(self, params: Any) -> None:
        network = self.config.saved_network or params.train_network
        entries = {p.name: p for p in network.get_parameters()}
        if self.config.save_optimizer and params.optimizer is not None:
            entries.update(params.optimizer.state_dict())
        append: dict[str, Any] = {}
        for item in self.config.append_info:
            if item == "epoch_num":
                append["epoch_num"] = params.cur_epoch_num
            elif item == "step_num":
                append["step_num"] = params.cur_step_num
            elif isinstance(item, dict):
                append.update(item)
            else:
                raise TrainError(
                    f"CheckpointConfig.append_info: unknown item {item!r}; use 'epoch_num', "
                    "'step_num' or a dict"
                )
        path = self.directory / f"{self.prefix}-{params.cur_epoch_num}_{params.cur_step_in_epoch}.ckpt"
        save_checkpoint(entries, path, append_dict=append, crc_check=self.config.crc_check)
        self.saved.append(path)
        self.latest_ckpt_file_name = path
        self._last_step = params.cur_step_num
        self._last_time = time.monotonic()
        while len(self.saved) > self.config.keep_checkpoint_max:
            self.saved.pop(0).unlink(missing_ok=True)
