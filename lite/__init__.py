"""lite: load and run .lite models.

    import lite
    model = lite.Model.load("model.lite")
    outputs = model.predict({"input": x})

The base install needs only numpy and flatbuffers; importing ``lite`` never imports onnx,
onnxruntime or grpc.
"""

from lite.binding import Binding
from lite.custom_ops import CustomOps
from lite.device_arrays import DeviceArray, pinned_empty
from lite.errors import (
    EngineUnavailableError,
    InputValueError,
    InvalidInputError,
    KernelError,
    LiteError,
    ModelFormatError,
    ModelNotFoundError,
    PreprocessingError,
    UnsupportedOpError,
)
from lite.model import Model, TensorSpec
from lite.version import __version__

__all__ = [
    "Binding",
    "CustomOps",
    "DeviceArray",
    "EngineUnavailableError",
    "InputValueError",
    "InvalidInputError",
    "KernelError",
    "LiteError",
    "Model",
    "ModelFormatError",
    "ModelNotFoundError",
    "PreprocessingError",
    "TensorSpec",
    "UnsupportedOpError",
    "__version__",
    "pinned_empty",
]
