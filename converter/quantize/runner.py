"""Running a .lite in-memory model on batches, with any of its tensors as outputs.

Calibration reads intermediate tensors and the accuracy tools compare float and quantized
models, so both run on the engine the model will be deployed on: ONNX Runtime (CPU) when it is
installed (QDQ graphs then run as its integer kernels), else lite's numpy engine. Sessions are
built without the on-disk cache: these models are throw-away variants.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from converter.quantize.data import InputSpec
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType, storage_dtype


def input_specs(model: lite_ir.Model) -> list[InputSpec]:
    graph = model.main
    specs = []
    for index in graph.inputs:
        tensor = graph.tensors[index]
        if tensor.data is not None:
            continue  # an input with a default value: calibration leaves it alone
        dtype = np.dtype(np.float32) if tensor.dtype == DataType.UNDEFINED else storage_dtype(tensor.dtype)
        specs.append(InputSpec(tensor.name, dtype, tuple(tensor.shape) if tensor.shape is not None else ()))
    return specs


def with_outputs(model: lite_ir.Model, names: list[str]) -> lite_ir.Model:
    """The same model whose main graph outputs are the tensors ``names`` (in that order)."""
    graph = model.main
    index_of = {tensor.name: index for index, tensor in enumerate(graph.tensors)}
    outputs = [index_of[name] for name in names]
    main = dataclasses.replace(graph, outputs=outputs)
    return dataclasses.replace(model, graphs=[main, *model.graphs[1:]])


def onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class Runner:
    """``run(feeds) -> {name: array}`` for ``model`` on ``engine`` ("ort", "numpy" or "auto")."""

    def __init__(self, model: lite_ir.Model, engine: str = "auto", threads: int | None = None) -> None:
        if engine == "auto":
            engine = "ort" if onnxruntime_available() else "numpy"
        self.engine_name = engine
        self.output_names = [model.main.tensors[i].name for i in model.main.outputs]
        self._engine = _make_engine(model, engine, threads)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._engine.run(feeds)


def _make_engine(model: lite_ir.Model, engine: str, threads: int | None) -> Any:
    from lite.engines import EngineRequest, create_engine

    request = EngineRequest(device="cpu", threads=threads, cache_dir=None)
    return create_engine("numpy" if engine == "numpy" else "onnxruntime", model, request)
