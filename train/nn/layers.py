"""Core layers: Conv2d, Dense, Flatten, Dropout and activations (``mindspore.nn``)."""

from __future__ import annotations

from typing import Any

from train import ops
from train.errors import ShapeError
from train.nn.cell import Cell
from train.nn.init import fan_in, initialize, uniform_bias
from train.random import generator
from train.tensor import Parameter, Tensor


def pair(value: int | tuple[int, ...], name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if len(value) == 2:
        return int(value[0]), int(value[1])
    if len(value) == 4 and value[0] == value[1] == 1:  # MindSpore's (1, 1, h, w) form
        return int(value[2]), int(value[3])
    raise ShapeError(f"{name} must be an int or a pair, got {value!r}")


class Conv2d(Cell):
    """``nn.Conv2d``: NCHW, weight ``(out, in/group, kh, kw)``, ``pad_mode`` 'same' (default),
    'valid' or 'pad' (then ``padding`` is an int or (top, bottom, left, right))."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        pad_mode: str = "same",
        padding: int | tuple[int, ...] = 0,
        dilation: int | tuple[int, int] = 1,
        group: int = 1,
        has_bias: bool = False,
        weight_init: Any = None,
        bias_init: Any = None,
    ) -> None:
        super().__init__()
        if in_channels % group or out_channels % group:
            raise ShapeError(
                f"Conv2d: in_channels={in_channels} and out_channels={out_channels} must be "
                f"divisible by group={group}"
            )
        if pad_mode not in ("same", "valid", "pad"):
            raise ShapeError(f"Conv2d: pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}")
        if pad_mode != "pad" and padding != 0:
            raise ShapeError(f"Conv2d: padding={padding!r} needs pad_mode='pad' (got {pad_mode!r})")
        self.in_channels, self.out_channels, self.group = in_channels, out_channels, group
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = pair(stride, "stride")
        self.dilation = pair(dilation, "dilation")
        self.pad_mode, self.padding = pad_mode, padding
        shape = (out_channels, in_channels // group, *self.kernel_size)
        self.weight = Parameter(initialize(weight_init, shape))
        self.has_bias = has_bias
        if has_bias:
            bias = (
                uniform_bias(out_channels, fan_in(shape))
                if bias_init is None
                else initialize(bias_init, (out_channels,))
            )
            self.bias = Parameter(bias)

    def construct(self, x: Tensor) -> Tensor:
        pads = ops.resolve_pads(
            self.pad_mode, self.padding, x.shape[2:], self.kernel_size, self.stride, self.dilation
        )
        return ops.conv2d(
            x, self.weight, self.bias if self.has_bias else None, self.stride, pads, self.dilation, self.group
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}->{self.out_channels}, kernel={self.kernel_size}, stride={self.stride}, "
            f"pad_mode={self.pad_mode}"
        )


class Dense(Cell):
    """``nn.Dense``: ``y = x @ weight.T + bias`` with weight ``(out, in)``; optional activation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        weight_init: Any = None,
        bias_init: Any = None,
        has_bias: bool = True,
        activation: Cell | str | None = None,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight = Parameter(initialize(weight_init, (out_channels, in_channels)))
        self.has_bias = has_bias
        if has_bias:
            bias = (
                uniform_bias(out_channels, in_channels)
                if bias_init is None
                else initialize(bias_init, (out_channels,))
            )
            self.bias = Parameter(bias)
        self.activation = get_activation(activation) if isinstance(activation, str) else activation

    def construct(self, x: Tensor) -> Tensor:
        if x.ndim != 2 or x.shape[1] != self.in_channels:
            raise ShapeError(
                f"Dense({self.in_channels}, {self.out_channels}): expected input (N, "
                f"{self.in_channels}), got {x.shape}; add nn.Flatten() before it"
            )
        out = ops.dense(x, self.weight, self.bias if self.has_bias else None)
        return self.activation(out) if self.activation is not None else out

    def extra_repr(self) -> str:
        return f"{self.in_channels}->{self.out_channels}"


class Flatten(Cell):
    """(N, ...) -> (N, prod(...))."""

    def construct(self, x: Tensor) -> Tensor:
        return ops.flatten(x)


class Dropout(Cell):
    """``nn.Dropout(keep_prob=None, p=None)``: drop probability ``p`` (or ``1 - keep_prob``);
    identity when not training."""

    def __init__(self, keep_prob: float | None = None, p: float | None = None) -> None:
        super().__init__()
        if p is None:
            p = 0.5 if keep_prob is None else 1.0 - keep_prob
        if not 0.0 <= p < 1.0:
            raise ShapeError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p
        self.rng = generator()

    def construct(self, x: Tensor) -> Tensor:
        return ops.dropout(x, self.p, self.rng) if self.training else x


class ReLU(Cell):
    def construct(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class ReLU6(Cell):
    def construct(self, x: Tensor) -> Tensor:
        return ops.relu6(x)


class Sigmoid(Cell):
    def construct(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class Tanh(Cell):
    def construct(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class GELU(Cell):
    """``nn.GELU(approximate=True)``: tanh approximation by default, exact (erf) otherwise."""

    def __init__(self, approximate: bool = True) -> None:
        super().__init__()
        self.approximate = approximate

    def construct(self, x: Tensor) -> Tensor:
        return ops.gelu(x, self.approximate)


_ACTIVATIONS = {"relu": ReLU, "relu6": ReLU6, "sigmoid": Sigmoid, "tanh": Tanh, "gelu": GELU}


def get_activation(name: str) -> Cell:
    """``nn.get_activation``: a Cell for an activation name."""
    try:
        return _ACTIVATIONS[name.lower()]()
    except KeyError:
        raise ShapeError(f"unknown activation {name!r}; choose from {sorted(_ACTIVATIONS)}") from None
