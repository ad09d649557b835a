"""Custom operators: Python kernels and compiled kernels with MindSpore's AOT signature.

Nodes that no engine knows (kept by ``lite convert --allow-custom``, or written by hand in a
domain of their own) run through a :class:`CustomOps` registry passed to ``Model.load``::

    ops = lite.CustomOps()

    @ops.python("Swish2", domain="com.example")
    def swish2(x, *, beta=1.0):
        return x / (1 + np.exp(-beta * x))

    ops.library("MyAdd", "./libmyadd.so", "MyAdd", domain="com.example",
                output_shapes=lambda x, y: [x.shape], output_dtypes=lambda x, y: [x.dtype])

    model = lite.Model.load("model.lite", custom_ops=ops)

A compiled kernel follows MindSpore's ``ops.Custom(func_type="aot")`` calling convention (the
same on CPU and GPU)::

    extern "C" int Func(int nparam, void **params, int *ndims, int64_t **shapes,
                        const char **dtypes, void *stream, void *extra);

``params`` holds the inputs, then the outputs (allocated by the runtime from the shapes and
dtypes the user gives, as values or functions of the inputs); ``dtypes`` are names such as
``"float32"``; ``stream`` and ``extra`` are NULL on the CPU. A non-zero return is an error.
Attributes named in ``attributes_as_inputs`` are appended to the inputs as 0-d or 1-d arrays,
as MindSpore passes attributes without a value as trailing arguments.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import KernelRegistry

ShapeSpec = Sequence[Sequence[int]] | Callable[..., Sequence[Sequence[int]]]
DtypeSpec = Sequence[Any] | Callable[..., Sequence[Any]]

_AOT_DTYPE_NAMES = {
    np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", np.dtype(np.float64): "float64",
    np.dtype(np.int8): "int8", np.dtype(np.int16): "int16", np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8", np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32", np.dtype(np.uint64): "uint64", np.dtype(np.bool_): "bool",
}
_AOT_SIGNATURE = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
                  ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p),
                  ctypes.c_void_p, ctypes.c_void_p]


class CustomOps(KernelRegistry):
    """Kernels for custom (domain, op type) pairs; they take precedence over built-in kernels."""

    def python(self, op_type: str, *, domain: str = "") -> Callable[[Callable], Callable]:
        """Decorator: register a Python function as the kernel of ``domain::op_type``.

        The function follows the built-in kernel convention (inputs positional, attributes as
        keyword-only parameters or ``**attributes``; returns an array or a tuple of arrays).
        """
        return self.register(op_type, domain=domain)

    def library(self, op_type: str, library: str | os.PathLike, function: str, *, domain: str = "",
                output_shapes: ShapeSpec, output_dtypes: DtypeSpec,
                attributes_as_inputs: Sequence[str] = ()) -> None:
        """Register ``function`` of the shared library ``library`` (AOT signature) for ``domain::op_type``."""
        path = Path(library)
        try:
            handle = ctypes.CDLL(str(path.resolve() if path.exists() else path))
        except OSError as err:
            raise FileNotFoundError(f"custom op {op_type}: cannot load library {library}: {err}") from err
        try:
            entry = getattr(handle, function)
        except AttributeError as err:
            raise LookupError(f"custom op {op_type}: {library} exports no function {function!r}") from err
        entry.restype = ctypes.c_int
        entry.argtypes = _AOT_SIGNATURE
        label = f"{domain + '::' if domain else ''}{op_type} ({path.name}:{function})"
        self.register(op_type, domain=domain)(
            _aot_kernel(entry, label, output_shapes, output_dtypes, tuple(attributes_as_inputs))
        )


def _attribute_array(value: Any) -> np.ndarray:
    """An attribute as a kernel argument: FLOAT(S) are float32 and INT(S) int64, as in ONNX."""
    array = np.asarray(value)
    if array.dtype.kind == "f":
        array = array.astype(np.float32)
    elif array.dtype.kind in "iub":
        array = array.astype(np.int64)
    return np.ascontiguousarray(array)


def _aot_kernel(entry, label: str, output_shapes: ShapeSpec, output_dtypes: DtypeSpec,
                attributes_as_inputs: tuple[str, ...]) -> Callable:
    def kernel(*inputs: np.ndarray, **attributes: Any) -> tuple[np.ndarray, ...]:
        arrays = [np.ascontiguousarray(x) for x in inputs]
        for name in attributes_as_inputs:
            if name not in attributes:
                raise KernelError(f"custom op {label}: attribute {name!r} is missing on the node")
            arrays.append(_attribute_array(attributes[name]))
        shapes = output_shapes(*inputs) if callable(output_shapes) else output_shapes
        dtypes = output_dtypes(*inputs) if callable(output_dtypes) else output_dtypes
        if len(shapes) != len(dtypes):
            raise KernelError(f"custom op {label}: {len(shapes)} output shapes but {len(dtypes)} output dtypes")
        outputs = [np.empty(tuple(int(d) for d in shape), dtype=np.dtype(dtype)) for shape, dtype in zip(shapes, dtypes)]
        buffers = arrays + outputs
        count = len(buffers)
        dims = [np.asarray(b.shape, dtype=np.int64) for b in buffers]  # kept alive for the call
        try:
            names = [_AOT_DTYPE_NAMES[b.dtype].encode() for b in buffers]
        except KeyError as err:
            raise KernelError(f"custom op {label}: dtype {err.args[0]} cannot be passed to an AOT kernel") from None
        params = (ctypes.c_void_p * count)(*[b.ctypes.data for b in buffers])
        ndims = (ctypes.c_int * count)(*[b.ndim for b in buffers])
        shape_pointers = (ctypes.POINTER(ctypes.c_int64) * count)(
            *[d.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)) for d in dims]
        )
        dtype_names = (ctypes.c_char_p * count)(*names)
        status = entry(count, params, ndims, shape_pointers, dtype_names, None, None)
        if status != 0:
            raise KernelError(f"custom op {label} returned error code {status}")
        return tuple(outputs)

    return kernel
