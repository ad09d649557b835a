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

A CUDA kernel (``library(..., device="cuda")``, built with ``nvcc --shared``) gets device
pointers and the engine's CUDA stream, as MindSpore's GPU backend passes them: the torch engine
on CUDA runs it between its compiled segments on the tensors it already holds, and ONNX Runtime's
CUDA engine between its segments on device ``OrtValue``s (:mod:`lite.engines.ort.device_kernels`),
outputs allocated on the device, no host copy. Elsewhere (the numpy engine, the CPU), the inputs
go to the GPU through PyTorch and the outputs come back (:class:`DeviceKernel`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lite.errors import EngineUnavailableError, KernelError
from lite.ops.registry import KernelRegistry, normalize_domain

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


AOT_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class DeviceKernel:
    """A compiled AOT function that works on GPU memory: what an engine needs to call it with
    device pointers (:meth:`call`), and how to size its outputs (:meth:`output_specs`)."""

    entry: Any
    label: str
    output_shapes: ShapeSpec
    output_dtypes: DtypeSpec
    attributes_as_inputs: tuple[str, ...]

    def output_specs(self, inputs: Sequence[Any]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """The outputs' shapes and dtypes for ``inputs`` (anything with ``.shape`` and ``.dtype``)."""
        return _output_specs(self.label, self.output_shapes, self.output_dtypes, inputs)

    def call(self, pointers: Sequence[int], shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype],
             stream: int) -> None:
        """Run on device buffers (inputs, then outputs) on ``stream`` (a ``cudaStream_t`` as an int)."""
        _invoke(self.entry, self.label, pointers, shapes, dtypes, stream)


class CustomOps(KernelRegistry):
    """Kernels for custom (domain, op type) pairs; they take precedence over built-in kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.device_kernels: dict[tuple[str, str], DeviceKernel] = {}

    def python(self, op_type: str, *, domain: str = "") -> Callable[[Callable], Callable]:
        """Decorator: register a Python function as the kernel of ``domain::op_type``.

        The function follows the built-in kernel convention (inputs positional, attributes as
        keyword-only parameters or ``**attributes``; returns an array or a tuple of arrays).
        """
        return self.register(op_type, domain=domain)

    def library(self, op_type: str, library: str | os.PathLike, function: str, *, domain: str = "",
                output_shapes: ShapeSpec, output_dtypes: DtypeSpec,
                attributes_as_inputs: Sequence[str] = (), device: str = "cpu") -> None:
        """Register ``function`` of the shared library ``library`` (AOT signature) for ``domain::op_type``.

        ``device``: ``"cpu"`` (host pointers, NULL stream) or ``"cuda"`` (device pointers and the
        engine's CUDA stream; see the module's docstring)."""
        if device not in AOT_DEVICES:
            raise ValueError(f"custom op {op_type}: device must be one of {', '.join(AOT_DEVICES)}; got {device!r}")
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
        attributes = tuple(attributes_as_inputs)
        if device == "cuda":
            kernel = DeviceKernel(entry, label, output_shapes, output_dtypes, attributes)
            self.register(op_type, domain=domain)(_staged_kernel(kernel))
            self.device_kernels[(normalize_domain(domain), op_type)] = kernel
            return
        self.register(op_type, domain=domain)(_aot_kernel(entry, label, output_shapes, output_dtypes, attributes))

    def device_kernel(self, op_type: str, domain: str) -> DeviceKernel | None:
        """The CUDA kernel registered for ``domain::op_type``, if any."""
        return self.device_kernels.get((normalize_domain(domain), op_type))


def _attribute_array(value: Any) -> np.ndarray:
    """An attribute as a kernel argument: FLOAT(S) are float32 and INT(S) int64, as in ONNX."""
    array = np.asarray(value)
    if array.dtype.kind == "f":
        array = array.astype(np.float32)
    elif array.dtype.kind in "iub":
        array = array.astype(np.int64)
    return np.ascontiguousarray(array)


def device_kernels(custom_ops: Any, nodes: Sequence[Any]) -> list[Any] | None:
    """The CUDA kernels of ``nodes`` (graph nodes with ``op_type`` and ``domain``) registered in
    ``custom_ops``, when every one of them has one; else None (the nodes then run elsewhere)."""
    lookup = getattr(custom_ops, "device_kernel", None)
    if lookup is None:
        return None
    kernels = [lookup(node.op_type, node.domain) for node in nodes]
    return kernels if all(kernel is not None for kernel in kernels) else None


def attribute_inputs(label: str, names: Sequence[str], attributes: dict[str, Any]) -> list[np.ndarray]:
    """The attributes named in ``attributes_as_inputs``, in order, as trailing kernel inputs."""
    arrays = []
    for name in names:
        if name not in attributes:
            raise KernelError(f"custom op {label}: attribute {name!r} is missing on the node")
        arrays.append(_attribute_array(attributes[name]))
    return arrays


def _output_specs(label: str, output_shapes: ShapeSpec, output_dtypes: DtypeSpec,
                  inputs: Sequence[Any]) -> list[tuple[tuple[int, ...], np.dtype]]:
    shapes = output_shapes(*inputs) if callable(output_shapes) else output_shapes
    dtypes = output_dtypes(*inputs) if callable(output_dtypes) else output_dtypes
    if len(shapes) != len(dtypes):
        raise KernelError(f"custom op {label}: {len(shapes)} output shapes but {len(dtypes)} output dtypes")
    specs = []
    for shape, dtype in zip(shapes, dtypes):
        try:
            kind = np.dtype(dtype)
        except TypeError:
            kind = np.dtype(str(dtype).rsplit(".", 1)[-1])  # torch.float32 and friends
        specs.append((tuple(int(d) for d in shape), kind))
    return specs


def _invoke(entry, label: str, pointers: Sequence[int], shapes: Sequence[tuple[int, ...]],
            dtypes: Sequence[np.dtype], stream: int | None) -> None:
    """Call an AOT function: ``pointers`` are the inputs' then the outputs' buffers."""
    count = len(pointers)
    dims = [np.asarray(shape, dtype=np.int64) for shape in shapes]  # kept alive for the call
    try:
        names = [_AOT_DTYPE_NAMES[np.dtype(d)].encode() for d in dtypes]
    except KeyError as err:
        raise KernelError(f"custom op {label}: dtype {err.args[0]} cannot be passed to an AOT kernel") from None
    params = (ctypes.c_void_p * count)(*pointers)
    ndims = (ctypes.c_int * count)(*[len(shape) for shape in shapes])
    shape_pointers = (ctypes.POINTER(ctypes.c_int64) * count)(
        *[d.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)) for d in dims]
    )
    dtype_names = (ctypes.c_char_p * count)(*names)
    status = entry(count, params, ndims, shape_pointers, dtype_names, stream, None)
    if status != 0:
        raise KernelError(f"custom op {label} returned error code {status}")


def _aot_kernel(entry, label: str, output_shapes: ShapeSpec, output_dtypes: DtypeSpec,
                attributes_as_inputs: tuple[str, ...]) -> Callable:
    def kernel(*inputs: np.ndarray, **attributes: Any) -> tuple[np.ndarray, ...]:
        arrays = [np.ascontiguousarray(x) for x in inputs]
        arrays += attribute_inputs(label, attributes_as_inputs, attributes)
        specs = _output_specs(label, output_shapes, output_dtypes, inputs)
        outputs = [np.empty(shape, dtype=dtype) for shape, dtype in specs]
        buffers = arrays + outputs
        _invoke(entry, label, [b.ctypes.data for b in buffers], [b.shape for b in buffers],
                [b.dtype for b in buffers], None)
        return tuple(outputs)

    return kernel


def _staged_kernel(kernel: DeviceKernel) -> Callable:
    """A CUDA kernel for host arrays: inputs copied to the GPU (PyTorch), outputs copied back.
    Engines on CUDA call :meth:`DeviceKernel.call` on device tensors instead."""
    def run(*inputs: np.ndarray, **attributes: Any) -> tuple[np.ndarray, ...]:
        try:
            import torch
        except ImportError as err:
            raise EngineUnavailableError(f"custom op {kernel.label} is a CUDA kernel: running it on host arrays "
                                         "needs PyTorch with a GPU (pip install torch)") from err
        if not torch.cuda.is_available():
            raise EngineUnavailableError(f"custom op {kernel.label} is a CUDA kernel and PyTorch sees no CUDA GPU")
        arrays = [np.ascontiguousarray(x) for x in inputs]
        arrays += attribute_inputs(kernel.label, kernel.attributes_as_inputs, attributes)
        return tuple(t.cpu().numpy() for t in run_device_kernel(kernel, [torch.from_numpy(a).cuda() for a in arrays],
                                                                 inputs))

    return run


def run_device_kernel(kernel: DeviceKernel, tensors: Sequence[Any], shape_inputs: Sequence[Any]) -> list[Any]:
    """Run ``kernel`` on CUDA torch ``tensors`` (the inputs, attributes appended) on the current
    stream; outputs are allocated on the same device. ``shape_inputs`` are what the output
    shape and dtype functions see (the node's inputs, without attributes)."""
    import torch

    device = tensors[0].device
    tensors = [t.contiguous() for t in tensors]
    outputs = [torch.empty(shape, dtype=_torch_dtype(torch, dtype), device=device)
               for shape, dtype in kernel.output_specs(shape_inputs)]
    buffers = [*tensors, *outputs]
    stream = torch.cuda.current_stream(device).cuda_stream
    kernel.call([b.data_ptr() for b in buffers], [tuple(b.shape) for b in buffers],
                [_numpy_dtype(b.dtype) for b in buffers], stream)
    return outputs


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    return getattr(torch, "bool" if dtype == np.bool_ else dtype.name)


def _numpy_dtype(dtype: Any) -> np.dtype:
    return np.dtype(str(dtype).rsplit(".", 1)[-1])
