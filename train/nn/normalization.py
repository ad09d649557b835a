"""``nn.BatchNorm1d`` and ``nn.BatchNorm2d`` (parameters gamma, beta, moving_mean, moving_variance).

MindSpore's momentum convention: ``moving = momentum * moving + (1 - momentum) * batch``
with ``momentum=0.9`` by default (PyTorch's 0.1 means the opposite weight).
"""

from __future__ import annotations

from typing import Any

from train import ops
from train.errors import ShapeError
from train.nn.cell import Cell
from train.nn.init import initialize
from train.tensor import Parameter, Tensor


class _BatchNorm(Cell):
    expected_ndim = 4

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.9,
        affine: bool = True,
        gamma_init: Any = "ones",
        beta_init: Any = "zeros",
        moving_mean_init: Any = "zeros",
        moving_var_init: Any = "ones",
        use_batch_statistics: bool | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ShapeError(f"{type(self).__name__}: momentum must be in [0, 1], got {momentum}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.use_batch_statistics = use_batch_statistics
        shape = (num_features,)
        self.gamma = Parameter(initialize(gamma_init, shape), requires_grad=affine)
        self.beta = Parameter(initialize(beta_init, shape), requires_grad=affine)
        self.moving_mean = Parameter(initialize(moving_mean_init, shape), requires_grad=False)
        self.moving_variance = Parameter(initialize(moving_var_init, shape), requires_grad=False)

    def construct(self, x: Tensor) -> Tensor:
        if x.ndim != self.expected_ndim:
            raise ShapeError(
                f"{type(self).__name__}({self.num_features}) expects a {self.expected_ndim}-D "
                f"input, got shape {x.shape}"
            )
        training = self.training if self.use_batch_statistics is None else self.use_batch_statistics
        return ops.batch_norm(
            x,
            self.gamma,
            self.beta,
            self.moving_mean,
            self.moving_variance,
            training,
            self.momentum,
            self.eps,
        )

    def extra_repr(self) -> str:
        return f"num_features={self.num_features}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) inputs."""

    expected_ndim = 2


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W) inputs, per channel."""

    expected_ndim = 4
