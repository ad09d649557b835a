"""``Custom``: a compiled kernel with MindSpore's AOT signature as a differentiable op
(``mindspore.ops.Custom(func_type="aot")``)::

    add = Custom("./add.so:CustomAdd", out_shape=lambda x, y: x, out_dtype=lambda x, y: x,
                 func_type="aot", bprop=lambda x, y, out, dout: (dout, dout))

The function has MindSpore's signature::

    extern "C" int CustomAdd(int nparam, void **params, int *ndims, int64_t **shapes,
                             const char **dtypes, void *stream, void *extra);

``params`` holds the inputs, then the output; a non-zero return is an error. ``device="cpu"``
(the default) passes host pointers and a NULL stream; ``device="cuda"`` (a kernel built with
``nvcc --shared``) passes device pointers and the current CUDA stream: the inputs go to the GPU
through PyTorch and the output comes back, since the training core computes on the host.
``out_shape`` and ``out_dtype`` follow MindSpore: functions of the inputs' shapes and dtypes (or
fixed values). Gradients come from ``bprop(*inputs, out, dout)``, or from a Cell's ``bprop``
when the op sits in one; without either the op is not differentiable.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from train.autograd import make_result
from train.errors import CustomKernelError, GradientError, MissingDependencyError, ShapeError
from train.tensor import Tensor

_SIGNATURE = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
              ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p),
              ctypes.c_void_p, ctypes.c_void_p]
_DTYPE_NAMES = {np.dtype(t): t for t in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                         "uint8", "uint16", "uint32", "uint64")}
_DTYPE_NAMES[np.dtype(np.bool_)] = "bool"


class Custom:
    """A compiled AOT kernel as an op on :class:`train.Tensor` (see the module docstring)."""

    def __init__(self, func: str, out_shape: Any, out_dtype: Any, func_type: str = "aot",
                 bprop: Callable | None = None, device: str = "cpu") -> None:
        if func_type != "aot":
            raise ValueError(f"Custom: func_type {func_type!r} is not supported; compiled kernels use 'aot'")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"Custom: device must be 'cpu' or 'cuda'; got {device!r}")
        library, _, name = str(func).rpartition(":")
        if not library or not name:
            raise ValueError(f"Custom: func must be 'path/to/lib.so:FunctionName'; got {func!r}")
        try:
            handle = ctypes.CDLL(str(Path(library).resolve()))
            self._entry = getattr(handle, name)
        except (OSError, AttributeError) as err:
            raise CustomKernelError(f"Custom: cannot load {name!r} from {library}: {err}") from err
        self._entry.restype = ctypes.c_int
        self._entry.argtypes = _SIGNATURE
        self.label = f"{Path(library).name}:{name}"
        self.out_shape, self.out_dtype, self.bprop, self.device = out_shape, out_dtype, bprop, device

    def __call__(self, *inputs: Any) -> Tensor:
        tensors = tuple(x if isinstance(x, Tensor) else Tensor(x) for x in inputs)
        arrays = [np.ascontiguousarray(t.data) for t in tensors]
        shape = self.out_shape(*[a.shape for a in arrays]) if callable(self.out_shape) else self.out_shape
        dtype = self.out_dtype(*[a.dtype for a in arrays]) if callable(self.out_dtype) else self.out_dtype
        out = self._run_cuda(arrays, tuple(shape), np.dtype(dtype)) if self.device == "cuda" else \
            self._run_host(arrays, np.empty(tuple(shape), np.dtype(dtype)))
        bprop = self.bprop

        def backward(dout: np.ndarray) -> tuple:
            if bprop is None:
                raise GradientError(f"Custom {self.label} has no bprop: give Custom(bprop=...) or wrap it in a "
                                    "Cell that defines bprop")
            grads = bprop(*tensors, Tensor(out), Tensor(dout))
            if not isinstance(grads, tuple) or len(grads) != len(tensors):
                raise GradientError(f"Custom {self.label}: bprop must return a tuple of {len(tensors)} gradients")
            return tuple(None if g is None else np.asarray(g.data if isinstance(g, Tensor) else g) for g in grads)

        return make_result(out, tensors, backward)

    def _call(self, pointers: list[int], arrays: list[Any], stream: int | None) -> None:
        count = len(arrays)
        try:
            names = [_DTYPE_NAMES[np.dtype(a.dtype)].encode() for a in arrays]
        except KeyError as err:
            raise ShapeError(f"Custom {self.label}: dtype {err.args[0]} cannot be passed to an AOT kernel") from None
        dims = [np.asarray(a.shape, dtype=np.int64) for a in arrays]
        status = self._entry(count, (ctypes.c_void_p * count)(*pointers),
                             (ctypes.c_int * count)(*[len(a.shape) for a in arrays]),
                             (ctypes.POINTER(ctypes.c_int64) * count)(
                                 *[d.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)) for d in dims]),
                             (ctypes.c_char_p * count)(*names), stream, None)
        if status != 0:
            raise CustomKernelError(f"Custom {self.label} returned error code {status}")

    def _run_host(self, arrays: list[np.ndarray], out: np.ndarray) -> np.ndarray:
        buffers = [*arrays, out]
        self._call([b.ctypes.data for b in buffers], buffers, None)
        return out

    def _run_cuda(self, arrays: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        try:
            import torch
        except ImportError as err:
            raise MissingDependencyError(f"Custom {self.label} is a CUDA kernel: it needs PyTorch with a GPU") from err
        if not torch.cuda.is_available():
            raise MissingDependencyError(f"Custom {self.label} is a CUDA kernel and PyTorch sees no CUDA GPU")
        buffers = [torch.from_numpy(a).cuda() for a in arrays]
        buffers.append(torch.empty(shape, dtype=getattr(torch, dtype.name), device="cuda"))
        stream = torch.cuda.current_stream().cuda_stream
        self._call([b.data_ptr() for b in buffers], [_Spec(b) for b in buffers], stream)
        return buffers[-1].cpu().numpy()


class _Spec:
    """Shape and numpy dtype of a torch tensor, as :meth:`Custom._call` reads them."""

    def __init__(self, tensor: Any) -> None:
        self.shape = tuple(tensor.shape)
        self.dtype = np.dtype(str(tensor.dtype).rsplit(".", 1)[-1])
