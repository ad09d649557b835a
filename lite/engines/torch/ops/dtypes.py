"""ONNX element types (``TensorProto.DataType`` numbers, :class:`lite.format.dtypes.DataType`) as torch dtypes."""

from __future__ import annotations

import torch

from lite.format.dtypes import DataType

_TORCH_TYPES: dict[DataType, torch.dtype] = {
    DataType.FLOAT: torch.float32, DataType.FLOAT16: torch.float16, DataType.DOUBLE: torch.float64,
    DataType.BFLOAT16: torch.bfloat16, DataType.INT8: torch.int8, DataType.UINT8: torch.uint8,
    DataType.INT16: torch.int16, DataType.INT32: torch.int32, DataType.INT64: torch.int64,
    DataType.BOOL: torch.bool, DataType.UINT16: torch.uint16, DataType.UINT32: torch.uint32,
    DataType.UINT64: torch.uint64,
}
# Types torch computes with everywhere (its unsigned 16/32/64-bit types have few kernels).
COMPUTE_TYPES = frozenset({DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE, DataType.BFLOAT16, DataType.INT8,
                           DataType.UINT8, DataType.INT16, DataType.INT32, DataType.INT64, DataType.BOOL})


def torch_dtype(onnx_type: int, float_type: torch.dtype = torch.float32) -> torch.dtype:
    """The torch dtype of an ONNX element type; FLOAT computes in ``float_type``."""
    kind = DataType(onnx_type)
    if kind == DataType.FLOAT:
        return float_type
    try:
        return _TORCH_TYPES[kind]
    except KeyError as err:
        raise ValueError(f"the torch engine has no dtype for ONNX element type {kind.name}") from err
