"""BitCast: reinterpret the bytes of a tensor as another type of the same width.

https://onnx.ai/onnx/operators/onnx__BitCast.html

The shape is unchanged and no value is converted. Types numpy lacks travel as their raw
storage (bfloat16 as uint16 words, float8 as bytes; see ``lite.format.dtypes``), so viewing
the storage is the bit cast. Packed 4- and 2-bit types are not supported by this kernel.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.format.dtypes import DataType, is_subbyte, storage_dtype
from lite.ops.registry import kernel


@kernel("BitCast", since=26)
def BitCast(input, *, to):
    try:
        target = DataType(int(to))
    except ValueError as err:
        raise KernelError(f"BitCast: unknown element type to={to}") from err
    if target == DataType.STRING or is_subbyte(target):
        raise UnsupportedOpError(f"BitCast: casting to {target.name} is not supported by the numpy engine")
    source = np.asarray(input)
    if source.dtype == object:
        raise KernelError("BitCast: string tensors have no bit pattern to reinterpret")
    dtype = storage_dtype(target)
    if dtype.itemsize != source.dtype.itemsize:
        raise KernelError(
            f"BitCast: {source.dtype} ({source.dtype.itemsize * 8} bits) cannot be reinterpreted as "
            f"{target.name} ({dtype.itemsize * 8} bits): the widths must match"
        )
    if target == DataType.BOOL:
        # numpy bools must be 0 or 1; any nonzero byte reads as true.
        return source.view(np.uint8) != 0
    # A C-ordered copy (0-d stays 0-d) owns its bytes; numpy stores them little endian here.
    return np.array(source, order="C").view(dtype)
