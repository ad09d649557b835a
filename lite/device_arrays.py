"""Arrays in GPU memory: recognising them on input, and returning them (:class:`DeviceArray`).

Anything that speaks DLPack and says it lives on a CUDA device is a device array: PyTorch
tensors, CuPy and JAX arrays. Outputs that stay on the GPU are returned as
:class:`DeviceArray`, which those libraries import without a copy (``torch.from_dlpack(y)``).
This module imports nothing beyond numpy (PyTorch is looked up only where a caller loaded it).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

KDL_CUDA = 2


def is_device_array(value: Any) -> bool:
    """True for arrays in CUDA memory that speak DLPack (PyTorch, CuPy, JAX, DeviceArray)."""
    device = getattr(value, "__dlpack_device__", None)
    if device is None or isinstance(value, np.ndarray):
        return False
    try:
        return device()[0] == KDL_CUDA
    except Exception:
        return False


_DTYPES: dict[Any, np.dtype] = {}  # foreign dtype object -> numpy dtype (a per-call cost otherwise)


def device_array_spec(value: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and numpy dtype of a device array, whatever library made it."""
    shape = tuple(value.shape)
    dtype = value.dtype
    known = _DTYPES.get(dtype)
    if known is None:
        try:
            known = np.dtype(dtype)
        except TypeError:
            # torch.float32 and friends: the name after the dot is numpy's name.
            known = np.dtype(str(dtype).rsplit(".", 1)[-1])
        _DTYPES[dtype] = known
    return shape, known


def torch_cuda_spec(value: Any) -> tuple[tuple[int, ...], np.dtype] | None:
    """Shape and numpy dtype of a PyTorch CUDA tensor, else None: the common GPU input recognised
    from its type, without the DLPack calls of :func:`is_device_array` (microseconds per call)."""
    torch = sys.modules.get("torch")  # a caller passing a tensor has imported it; never imported here
    if torch is None or type(value) is not torch.Tensor or not value.is_cuda:
        return None
    dtype = value.dtype
    known = _DTYPES.get(dtype)
    if known is None:
        known = device_array_spec(value)[1]
    return value.shape, known


class DeviceArray:
    """A tensor in GPU memory returned by lite; import it with ``torch.from_dlpack`` or ``cupy.from_dlpack``.

    It wraps what the engine produced: an ``onnxruntime.OrtValue`` on the device, or a tensor of
    the caller's framework (a PyTorch tensor when the inputs were PyTorch tensors); either way
    DLPack hands the memory over without a copy.
    """

    def __init__(self, value: Any) -> None:
        self._value = value

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self._value.shape
        return tuple(shape() if callable(shape) else shape)

    @property
    def dtype(self) -> np.dtype:
        if hasattr(self._value, "data_type"):  # an OrtValue
            return numpy_dtype_of_ortvalue(self._value)
        return device_array_spec(self._value)[1]

    @property
    def device(self) -> str:
        return f"cuda:{self.__dlpack_device__()[1]}"

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._value.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._value.__dlpack_device__()

    def numpy(self) -> np.ndarray:
        """A host copy."""
        if hasattr(self._value, "data_type"):  # an OrtValue
            return self._value.numpy()
        return self._value.cpu().numpy()  # a framework tensor (PyTorch)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r})"


_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16, "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32, "tensor(uint32)": np.uint32, "tensor(int64)": np.int64,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def numpy_dtype_of_ortvalue(value: Any) -> np.dtype:
    return np.dtype(_ORT_TYPES[value.data_type()])


def pinned_empty(shape: tuple[int, ...] | list[int], dtype: Any = np.float32) -> np.ndarray:
    """A numpy array in page-locked (pinned) host memory, for inputs that go to the GPU.

    The CUDA driver copies pinned memory to the device by DMA at full bus speed (about 55 GB/s
    on an H200's host link against 17 GB/s from ordinary memory, bench/gpu_host_copies.py);
    copying an ordinary array into a pinned one first gains nothing, so fill this array where
    the data is produced (decoding, preprocessing) and pass it to ``predict`` like any other.
    Allocated through PyTorch or CuPy, whichever is installed (lite itself needs neither).
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    errors = []
    for name in ("torch", "cupy"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError as err:
                errors.append(f"{name}: {err}")
                continue
        try:
            if name == "torch":
                torch = sys.modules["torch"]
                # numpy's dtype name is torch's for every type both have (float16, int8, bool...).
                kind = getattr(torch, "bool" if dtype == np.bool_ else dtype.name)
                return torch.empty(shape, dtype=kind, pin_memory=True).numpy()  # the array keeps the tensor
            cupyx = __import__("cupyx")
            return cupyx.empty_pinned(shape, dtype=dtype)
        except Exception as err:  # no CUDA driver, no such dtype: try the next library
            errors.append(f"{name}: {type(err).__name__}: {err}")
    from lite.errors import EngineUnavailableError

    raise EngineUnavailableError(
        "pinned host memory needs PyTorch or CuPy with a CUDA driver (pip install torch, or cupy-cuda12x): "
        + "; ".join(errors)
    )


def synchronize_device(device_id: int) -> None:
    """Wait for the device's queued work, through whichever array library the caller uses."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize(device_id)
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with cupy.cuda.Device(device_id):
            cupy.cuda.runtime.deviceSynchronize()
