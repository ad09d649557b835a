"""Optimizers: ``SGD``, ``Momentum``, ``Adam``, ``AdamW``.

Each implements one per-parameter update (``update``); the base class handles loss scaling,
weight decay, the learning-rate schedule and the state, a plain ``{name: array}`` dict with
MindSpore's names (``moments.conv1.weight``, ``global_step``) that checkpoints as is.
Calling the optimizer with gradients (``opt(grads)``) applies one step, as ``TrainOneStepCell``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from train.errors import TrainError
from train.nn.learning_rate import LearningRateSchedule
from train.tensor import Parameter, Tensor

LearningRate = float | Sequence[float] | np.ndarray | LearningRateSchedule


class OptimizerError(TrainError, ValueError):
    """Bad optimizer arguments or gradients that do not match the parameters."""


def default_decay_filter(param: Parameter) -> bool:
    """MindSpore's default: no weight decay on BatchNorm/LayerNorm ``gamma`` and ``beta``."""
    return "beta" not in param.name and "gamma" not in param.name


class Optimizer:
    """Base of optimizers; ``parameters`` is the tuple of Parameters it updates."""

    state_names: tuple[str, ...] = ()

    def __init__(
        self,
        params: Iterable[Parameter],
        learning_rate: LearningRate,
        weight_decay: float = 0.0,
        loss_scale: float = 1.0,
        decay_filter: Callable[[Parameter], bool] = default_decay_filter,
    ) -> None:
        self.parameters: tuple[Parameter, ...] = tuple(params)
        if not self.parameters:
            raise OptimizerError(
                f"{type(self).__name__} got an empty parameter list; pass net.trainable_params()"
            )
        if loss_scale <= 0:
            raise OptimizerError(f"loss_scale must be positive, got {loss_scale}")
        self.learning_rate = learning_rate
        self.weight_decay = float(weight_decay)
        self.loss_scale = float(loss_scale)
        self.decay_flags = tuple(decay_filter(p) for p in self.parameters)
        self.global_step = 0
        self.state: dict[str, np.ndarray] = {}
        for prefix in self.state_names:
            for p in self.parameters:
                self.state[f"{prefix}.{p.name}"] = np.zeros_like(p.data)

    def get_lr(self) -> float:
        """The learning rate of the current step."""
        lr = self.learning_rate
        if isinstance(lr, LearningRateSchedule):
            return float(lr(self.global_step))
        if isinstance(lr, (list, tuple, np.ndarray)):
            return float(lr[min(self.global_step, len(lr) - 1)])
        return float(lr)

    def __call__(self, gradients: Sequence[Any]) -> None:
        if len(gradients) != len(self.parameters):
            raise OptimizerError(
                f"{type(self).__name__} got {len(gradients)} gradients for "
                f"{len(self.parameters)} parameters; compute them with weights=opt.parameters"
            )
        lr = self.get_lr()
        for param, grad, decay in zip(self.parameters, gradients, self.decay_flags):
            g = grad.data if isinstance(grad, Tensor) else np.asarray(grad)
            if g.shape != param.shape:
                raise OptimizerError(
                    f"gradient for {param.name} has shape {g.shape}, parameter {param.shape}"
                )
            if self.loss_scale != 1.0:
                g = g / self.loss_scale
            if self.weight_decay and decay and not self.decoupled_decay:
                g = g + self.weight_decay * param.data
            self.update(param, g.astype(param.dtype, copy=False), lr, decay)
        self.global_step += 1

    decoupled_decay = False

    def update(self, param: Parameter, grad: np.ndarray, lr: float, decay: bool) -> None:
        raise NotImplementedError

    # --- checkpointable state -----------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """``{moments.<param>: array, ..., learning_rate, global_step}`` (MindSpore's names)."""
        out = {name: value.copy() for name, value in self.state.items()}
        out["learning_rate"] = np.asarray([self.get_lr()], dtype=np.float32)
        out["global_step"] = np.asarray([self.global_step], dtype=np.int32)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, current in self.state.items():
            if name not in state:
                raise OptimizerError(f"optimizer state {name!r} is missing from the given dict")
            value = np.asarray(state[name].data if isinstance(state[name], Tensor) else state[name])
            if value.shape != current.shape:
                raise OptimizerError(
                    f"optimizer state {name!r}: shape {value.shape}, expected {current.shape}"
                )
            self.state[name] = value.astype(current.dtype).copy()
        if "global_step" in state:
            step = state["global_step"]
            self.global_step = int(np.asarray(step.data if isinstance(step, Tensor) else step).reshape(-1)[0])


class SGD(Optimizer):
    """``nn.SGD``: ``accum = momentum * accum + (1 - dampening) * g``; ``p -= lr * accum``
    (``p -= lr * (g + momentum * accum)`` with nesterov); plain ``p -= lr * g`` when momentum is 0."""

    state_names = ("accum",)

    def __init__(
        self,
        params: Iterable[Parameter],
        learning_rate: LearningRate = 0.1,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        loss_scale: float = 1.0,
    ) -> None:
        super().__init__(params, learning_rate, weight_decay, loss_scale)
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov

    def update(self, param: Parameter, grad: np.ndarray, lr: float, decay: bool) -> None:
        if self.momentum == 0.0:
            param.data -= lr * grad
            return
        accum = self.state[f"accum.{param.name}"]
        accum *= self.momentum
        accum += (1.0 - self.dampening) * grad
        step = grad + self.momentum * accum if self.nesterov else accum
        param.data -= lr * step


class Momentum(Optimizer):
    """``nn.Momentum`` (``ApplyMomentum``): ``accum = momentum * accum + g``; ``p -= lr * accum``,
    or ``p -= lr * (g + momentum * accum)`` with ``use_nesterov``. State ``moments.<param>``."""

    state_names = ("moments",)

    def __init__(
        self,
        params: Iterable[Parameter],
        learning_rate: LearningRate,
        momentum: float,
        weight_decay: float = 0.0,
        loss_scale: float = 1.0,
        use_nesterov: bool = False,
    ) -> None:
        super().__init__(params, learning_rate, weight_decay, loss_scale)
        if momentum < 0.0:
            raise OptimizerError(f"Momentum: momentum must be >= 0, got {momentum}")
        self.momentum, self.use_nesterov = momentum, use_nesterov

    def update(self, param: Parameter, grad: np.ndarray, lr: float, decay: bool) -> None:
        accum = self.state[f"moments.{param.name}"]
        accum *= self.momentum
        accum += grad
        if self.use_nesterov:
            param.data -= lr * (grad + self.momentum * accum)
        else:
            param.data -= lr * accum


class Adam(Optimizer):
    """``nn.Adam``: bias-corrected first/second moments (``moment1``/``moment2``); L2 weight decay
    added to the gradient."""

    state_names = ("moment1", "moment2")

    def __init__(
        self,
        params: Iterable[Parameter],
        learning_rate: LearningRate = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        loss_scale: float = 1.0,
    ) -> None:
        super().__init__(params, learning_rate, weight_decay, loss_scale)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def update(self, param: Parameter, grad: np.ndarray, lr: float, decay: bool) -> None:
        m = self.state[f"moment1.{param.name}"]
        v = self.state[f"moment2.{param.name}"]
        m *= self.beta1
        m += (1.0 - self.beta1) * grad
        v *= self.beta2
        v += (1.0 - self.beta2) * grad * grad
        t = self.global_step + 1
        step_size = lr * np.sqrt(1.0 - self.beta2**t) / (1.0 - self.beta1**t)
        if self.decoupled_decay and decay and self.weight_decay:
            param.data -= lr * self.weight_decay * param.data
        param.data -= (step_size * m / (np.sqrt(v) + self.eps)).astype(param.dtype, copy=False)


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p -= lr * weight_decay * p`` before the Adam step."""

    decoupled_decay = True

    def __init__(
        self,
        params: Iterable[Parameter],
        learning_rate: LearningRate = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        loss_scale: float = 1.0,
    ) -> None:
        super().__init__(params, learning_rate, beta1, beta2, eps, weight_decay, loss_scale)
