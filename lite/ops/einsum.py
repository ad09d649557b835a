"""Einsum: Einstein summation. https://onnx.ai/onnx/operators/onnx__Einsum.html

The equation grammar (``->`` output, ``...`` broadcasting, implicit output in alphabetical
order) is numpy's, so ``numpy.einsum`` evaluates it; spaces are removed first. The result
keeps the inputs' element type.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Einsum", since=12)
def Einsum(*Inputs, equation):
    operands = [np.asarray(x) for x in Inputs]
    if not operands:
        raise KernelError("Einsum: expected at least one input, got none")
    compact = equation.replace(" ", "")
    try:
        result = np.einsum(compact, *operands, optimize=len(operands) > 2)
    except ValueError as err:
        shapes = [x.shape for x in operands]
        raise KernelError(
            f"Einsum: equation {equation!r} does not fit inputs of shapes {shapes}: {err}"
        ) from err
    return np.asarray(result).astype(operands[0].dtype, copy=False)
