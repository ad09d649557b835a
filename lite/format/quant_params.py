"""Quantization parameters read from a .lite tensor table, checked before any engine sees them.

Scales are finite and positive, zero points as many as scales, the bit width in 1..32, and the
count of scales what the granularity needs: one per tensor, one per index of the quantized axis,
or one per block of ``block_size`` along it (times the other dimensions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lite.errors import ModelFormatError
from lite.format import ir

GRANULARITY_PER_TENSOR, GRANULARITY_PER_AXIS, GRANULARITY_PER_BLOCK = 0, 1, 2


def quant_params(table: dict[str, Any], shape, where: str, implied: np.ndarray | None = None) -> ir.QuantParams:
    """The quantization parameters a tensor table stores, checked against the tensor's ``shape``.

    ``implied``: the recomputed scales of a table whose scales are implied (format 2.1).
    """
    where = f"{where} quantization"
    scale, zero_point = (table["scale"] if implied is None else implied), table["zero_point"]
    scale = np.zeros(0, np.float32) if scale is None else scale
    # Absent zero points (format 2.0) are all 0; an empty vector is a count like any other.
    zero_point = np.zeros(len(scale), np.int64) if zero_point is None else zero_point
    if len(zero_point) != len(scale):
        raise ModelFormatError(f"{where}: {len(scale)} scales but {len(zero_point)} zero points")
    bits = table["bits"]
    if not 1 <= bits <= 32:
        raise ModelFormatError(f"{where}: bit width {bits} is not in 1..32")
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise ModelFormatError(f"{where}: scales must be finite and positive")
    granularity, axis, block = table["granularity"], table["axis"], table["block_size"]
    if granularity == GRANULARITY_PER_TENSOR:
        if len(scale) != 1:
            raise ModelFormatError(f"{where}: per-tensor quantization has 1 scale, found {len(scale)}")
        return ir.QuantParams(scale, zero_point, None, bits, table["signed"], table["symmetric"], 0)
    if shape is not None:
        if not -len(shape) <= axis < len(shape):
            raise ModelFormatError(f"{where}: axis {axis} is out of range for rank {len(shape)}")
        extent = shape[axis]
        if isinstance(extent, int):
            if granularity == GRANULARITY_PER_AXIS:
                expected = extent
            else:
                if block <= 0:
                    raise ModelFormatError(f"{where}: per-block quantization needs block_size > 0, got {block}")
                others = 1
                for position, dim in enumerate(shape):
                    if position != axis % len(shape):
                        others = others * dim if isinstance(dim, int) else -1
                expected = -(-extent // block) * others if others >= 0 else len(scale)
            if len(scale) != expected:
                raise ModelFormatError(
                    f"{where}: {len(scale)} scales, but axis {axis} of shape {shape} needs {expected}"
                )
    if granularity == GRANULARITY_PER_BLOCK and block <= 0:
        raise ModelFormatError(f"{where}: per-block quantization needs block_size > 0, got {block}")
    return ir.QuantParams(scale, zero_point, axis, bits, table["signed"], table["symmetric"],
                          block if granularity == GRANULARITY_PER_BLOCK else 0)
