"""What every engine is: the :class:`Engine` protocol, and the one list of devices.

An engine runs a loaded model. Callers read its typed fields instead of parsing its display
name: ``kind`` says which engine it is (``numpy``, ``onnxruntime``, ``openvino``, ``torch``, or
``auto`` for the per-batch choice autotuning made), ``placement`` where it computes (``cpu``,
``cuda``, ``tensorrt``; ``mixed`` for an autotuned set that spans both), ``on_gpu`` whether its
inputs and outputs may live on a GPU (serving schedules and reports it from that). ``name`` stays
the short text ``lite.Model.device`` shows (``cpu`` for ONNX Runtime's CPU provider, ``torch-cuda``...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lite.format import ir

# The devices lite.Model.load takes: "auto" picks the best available; "numpy" is the numpy
# engine; the others are where ONNX Runtime's execution providers run.
DEVICES = ("auto", "numpy", "cpu", "cuda", "tensorrt")
GPU_PLACEMENTS = ("cuda", "tensorrt")
KINDS = ("numpy", "onnxruntime", "openvino", "torch", "auto")


@runtime_checkable
class Engine(Protocol):
    """A model bound to an engine, ready to run."""

    name: str  # short display name (lite.Model.device)
    kind: str  # one of KINDS
    placement: str  # "cpu", "cuda", "tensorrt" or "mixed"

    @property
    def on_gpu(self) -> bool: ...

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]: ...

    def describe(self) -> Any: ...


def on_gpu(placement: str) -> bool:
    return placement in GPU_PLACEMENTS or placement == "mixed"


def default_cache_dir() -> Path:
    """The cache root of every engine: ``$XDG_CACHE_HOME/lite`` or ``~/.cache/lite``.

    Every engine's caches live below it (ONNX Runtime sessions, OpenVINO models, Inductor
    artifacts, autotuning decisions).
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lite"


def has_half_weights(model: ir.Model) -> bool:
    """True when the model stores float16 weights (it was converted with ``lite convert --fp16``)."""
    return any(t.is_constant and t.dtype == ir.DataType.FLOAT16 for t in model.main.tensors)


def default_precision(model: ir.Model) -> str:
    """The policy a caller who names none gets: the one the model was converted for. ``"fp16"``
    for a model that stores float16 weights (GPU engines compute in float16; CPU engines, which
    have few float16 kernels, in float32), else ``"exact"``."""
    return "fp16" if has_half_weights(model) else "exact"
