"""``nn.MaxPool2d``, ``nn.AvgPool2d`` and global average pooling."""

from __future__ import annotations

from train import ops
from train.errors import ShapeError
from train.nn.cell import Cell
from train.nn.layers import pair
from train.tensor import Tensor


class _Pool2d(Cell):
    def __init__(
        self,
        kernel_size: int | tuple[int, int] = 1,
        stride: int | tuple[int, int] = 1,
        pad_mode: str = "valid",
        padding: int | tuple[int, ...] = 0,
    ) -> None:
        super().__init__()
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = pair(stride, "stride")
        if pad_mode.lower() not in ("same", "valid", "pad"):
            raise ShapeError(
                f"{type(self).__name__}: pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}"
            )
        self.pad_mode, self.padding = pad_mode.lower(), padding

    def _pads(self, x: Tensor) -> tuple[int, int, int, int]:
        return ops.resolve_pads(
            self.pad_mode, self.padding, x.shape[2:], self.kernel_size, self.stride, (1, 1)
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, pad_mode={self.pad_mode}"


class MaxPool2d(_Pool2d):
    """``nn.MaxPool2d(kernel_size=1, stride=1, pad_mode='valid')``; padded cells never win."""

    def construct(self, x: Tensor) -> Tensor:
        return ops.max_pool2d(x, self.kernel_size, self.stride, self._pads(x))


class AvgPool2d(_Pool2d):
    """``nn.AvgPool2d(kernel_size=1, stride=1, pad_mode='valid')``; padding is not counted."""

    def construct(self, x: Tensor) -> Tensor:
        return ops.avg_pool2d(x, self.kernel_size, self.stride, self._pads(x))


class GlobalAvgPool2d(Cell):
    """Mean over H and W: (N, C, H, W) -> (N, C, 1, 1), or (N, C) with ``keep_dims=False``.

    MindSpore's ResNet writes this as ``ops.ReduceMean(keep_dims=True)(x, (2, 3))``.
    """

    def __init__(self, keep_dims: bool = True) -> None:
        super().__init__()
        self.keep_dims = keep_dims

    def construct(self, x: Tensor) -> Tensor:
        out = ops.global_avg_pool2d(x)
        return out if self.keep_dims else ops.flatten(out)
