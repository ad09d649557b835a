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
from lite.errors import LiteError
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType, storage_dtype


def input_specs(model: lite_ir.Model, whole: bool = False) -> list[InputSpec]:
    """The model's inputs for reading calibration data; ``whole``: fed as given (no batch axis)."""
    graph = model.main
    specs = []
    for index in graph.inputs:
        tensor = graph.tensors[index]
        if tensor.data is not None:
            continue  # an input with a default value: calibration leaves it alone
        dtype = np.dtype(np.float32) if tensor.dtype == DataType.UNDEFINED else storage_dtype(tensor.dtype)
        specs.append(InputSpec(tensor.name, dtype, tuple(tensor.shape) if tensor.shape is not None else (), whole))
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

        # Set once a batch of several samples failed and one sample at a time ran: why.
        self.one_at_a_time: str | None = None

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model on a batch of samples (stacked on axis 0).

        Some exports declare a symbolic batch dimension but only run at batch 1 (torch.export
        specializes a reshape of LeViT's attention, for one). When a batch of several samples
        fails, the samples run one at a time, from then on, and :attr:`one_at_a_time` says why;
        a failure at batch 1 is the model's own and is raised.
        """
        size = _batch_size(feeds)
        if self.one_at_a_time is None or size <= 1:
            try:
                return self._engine.run(feeds)
            except LiteError as err:
                if size <= 1:
                    raise
                self.one_at_a_time = f"the model failed at batch {size} ({err}); samples ran one at a time"
        parts = [self._engine.run({name: value[i : i + 1] for name, value in feeds.items()}) for i in range(size)]
        return {name: np.concatenate([np.asarray(part[name]) for part in parts]) for name in parts[0]}


def _batch_size(feeds: dict[str, np.ndarray]) -> int:
    sizes = {np.shape(value)[0] for value in feeds.values() if np.ndim(value) > 0}
    return sizes.pop() if len(sizes) == 1 else 1


def _make_engine(model: lite_ir.Model, engine: str, threads: int | None) -> Any:
    from lite.engines import EngineRequest, create_engine

    request = EngineRequest(device="cpu", threads=threads, cache_dir=None)
    return create_engine("numpy" if engine == "numpy" else "onnxruntime", model, request)
