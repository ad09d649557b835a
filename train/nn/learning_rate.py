"""Learning-rate schedules: step, cosine and warm-up.

Two forms, as in MindSpore: functions that return one rate per step (``nn.cosine_decay_lr``,
``nn.warmup_lr``, ``nn.piecewise_constant_lr``), which an optimizer takes as a list, and
``LearningRateSchedule`` objects called with the global step (``nn.CosineDecayLR``,
``nn.WarmUpLR``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from train.errors import TrainError


class ScheduleError(TrainError, ValueError):
    """A schedule was given arguments that define no sensible rate."""


class LearningRateSchedule:
    """Base: ``schedule(global_step) -> learning rate``."""

    def __call__(self, global_step: int) -> float:
        raise NotImplementedError


class StepDecayLR(LearningRateSchedule):
    """``learning_rate * gamma ** (global_step // step_size)``."""

    def __init__(self, learning_rate: float, step_size: int, gamma: float = 0.1) -> None:
        if step_size <= 0:
            raise ScheduleError(f"StepDecayLR: step_size must be positive, got {step_size}")
        self.learning_rate, self.step_size, self.gamma = learning_rate, step_size, gamma

    def __call__(self, global_step: int) -> float:
        return self.learning_rate * self.gamma ** (global_step // self.step_size)


class CosineDecayLR(LearningRateSchedule):
    """``min_lr + (max_lr - min_lr) * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2``."""

    def __init__(self, min_lr: float, max_lr: float, decay_steps: int) -> None:
        if decay_steps <= 0 or min_lr > max_lr:
            raise ScheduleError(
                f"CosineDecayLR: need decay_steps > 0 and min_lr <= max_lr, got "
                f"decay_steps={decay_steps}, min_lr={min_lr}, max_lr={max_lr}"
            )
        self.min_lr, self.max_lr, self.decay_steps = min_lr, max_lr, decay_steps

    def __call__(self, global_step: int) -> float:
        progress = min(global_step, self.decay_steps) / self.decay_steps
        return self.min_lr + (self.max_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmUpLR(LearningRateSchedule):
    """``learning_rate * min(step, warmup_steps) / warmup_steps``; then ``after(step - warmup_steps)``
    when a following schedule is given (warm-up then cosine, for example)."""

    def __init__(
        self, learning_rate: float, warmup_steps: int, after: LearningRateSchedule | None = None
    ) -> None:
        if warmup_steps <= 0:
            raise ScheduleError(f"WarmUpLR: warmup_steps must be positive, got {warmup_steps}")
        self.learning_rate, self.warmup_steps, self.after = learning_rate, warmup_steps, after

    def __call__(self, global_step: int) -> float:
        if self.after is not None and global_step >= self.warmup_steps:
            return self.after(global_step - self.warmup_steps)
        return self.learning_rate * min(global_step + 1, self.warmup_steps) / self.warmup_steps


def piecewise_constant_lr(milestone: Sequence[int], learning_rates: Sequence[float]) -> list[float]:
    """``learning_rates[i]`` for steps before ``milestone[i]`` (increasing step counts)."""
    if len(milestone) != len(learning_rates) or list(milestone) != sorted(milestone):
        raise ScheduleError(
            "piecewise_constant_lr: milestone must be increasing and as long as learning_rates"
        )
    rates: list[float] = []
    previous = 0
    for end, rate in zip(milestone, learning_rates):
        rates.extend([rate] * (end - previous))
        previous = end
    return rates


def cosine_decay_lr(
    min_lr: float, max_lr: float, total_step: int, step_per_epoch: int, decay_epoch: int
) -> list[float]:
    """One rate per step, cosine over ``decay_epoch`` epochs, constant per epoch (``nn.cosine_decay_lr``)."""
    schedule = CosineDecayLR(min_lr, max_lr, decay_epoch)
    return [schedule(min(i // step_per_epoch, decay_epoch)) for i in range(total_step)]


def warmup_lr(learning_rate: float, total_step: int, step_per_epoch: int, warmup_epoch: int) -> list[float]:
    """One rate per step growing linearly per epoch to ``learning_rate`` (``nn.warmup_lr``)."""
    return [
        learning_rate * min(i // step_per_epoch + 1, warmup_epoch) / warmup_epoch for i in range(total_step)
    ]


def step_lr(learning_rate: float, total_step: int, step_size: int, gamma: float = 0.1) -> list[float]:
    schedule = StepDecayLR(learning_rate, step_size, gamma)
    return [schedule(i) for i in range(total_step)]
