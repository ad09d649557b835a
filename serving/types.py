"""Transport-free request and response types of the data plane.

Tensors are numpy arrays already decoded from the wire; the transport converts its messages
to these and back (``serving.grpc.converters``), so the core never sees a protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .shared_memory import RegionSlice

ParameterValue = bool | int | float | str


@dataclass(frozen=True)
class TensorInfo:
    """One served input or output: the client-facing name, KServe datatype and shape (-1: any)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    # The model's declared dimensions, symbols kept ("N"): what ties an output's size to the
    # inputs' (serving.limits). Empty when the model does not declare them.
    dims: tuple[int | str | None, ...] = ()


@dataclass
class RequestedOutput:
    name: str
    classification: int = 0  # > 0: answer the top-k classes as BYTES "score:index[:label]"
    shared_memory: RegionSlice | None = None  # set: written there, not answered in the message


@dataclass
class InferenceRequest:
    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: str = ""
    id: str = ""
    outputs: list[RequestedOutput] = field(default_factory=list)  # empty: every output
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    deadline: float | None = None  # time.monotonic() after which the request is dropped


@dataclass
class InferenceResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[tuple[str, np.ndarray]]
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelIndexEntry:
    name: str
    version: str
    state: str  # READY | UNAVAILABLE | LOADING | UNLOADING
    reason: str = ""
