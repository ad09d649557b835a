"""What a served model runs on before its first request: zero inputs of the sizes its file records.

A model version warms up at load (:meth:`serving.model.ServedModel.warmup`) so that an engine's
per-shape work happens before it is READY, and a model that leaves its outputs' types open is run
once to learn them. Both need inputs no request gave: zeros, batched as configured, with
symbolic sizes beyond the batch as the converter recorded them (lite.signature.sample_shapes),
and one-element integer inputs holding the value recorded with them (a sample rate the graph
compares). The answers are checked here too: a model whose outputs do not lead with the batch
cannot have its merged requests split.
"""

from __future__ import annotations

import numpy as np

import lite
from lite.signature import batch_names, concrete_shape, sample_shapes, sample_values

from .errors import ConfigError, ModelLoadError


def zero_inputs(model: lite.Model, batch_size: int, batched: bool) -> dict[str, np.ndarray]:
    """Zeros of each input's shape: symbolic sizes beyond the batch as the model file records
    them (lite.signature.sample_shapes), else 1; one-element integer inputs hold the value it
    records. ``batched``: the model is served with a batch dimension (max_batch_size > 0)."""
    samples, values = sample_shapes(model.ir), sample_values(model.ir)
    batch_dims = batch_names(model.inputs)  # a state's [2, batch, 128] follows the batch
    batch = batch_size if batched else 1
    feed = {}
    for spec in model.inputs:
        shape = ([] if spec.shape is None
                 else list(concrete_shape(spec, batch, samples.get(spec.name), batch_dims)))
        if batched and shape:
            shape[0] = batch_size
        # A recorded sample rate or flag, as the graph compares it: zero may take a branch that fails.
        feed[spec.name] = np.full(shape, values.get(spec.name, 0), dtype=spec.dtype or np.float32)
    return feed


def unknown_sizes(model: lite.Model) -> list[str]:
    """Inputs with symbolic sizes beyond the batch that the model file gives no sample of."""
    samples = sample_shapes(model.ir)
    return [spec.name for spec in model.inputs if spec.name not in samples
            and spec.shape is not None and any(not isinstance(d, int) for d in spec.shape[1:])]


def complete_outputs(model: lite.Model, batched: bool) -> list[lite.TensorSpec]:
    """Output specs with dtype and rank; a model that leaves them open is run once on zeros
    to learn them (every dimension is then variable)."""
    specs = list(model.outputs)
    if all(s.dtype is not None and s.shape is not None for s in specs):
        return specs
    try:
        probe = model.predict(zero_inputs(model, 1, batched))
    except Exception as err:  # any engine failure: the model cannot be described
        raise ConfigError(f"outputs have no declared dtype/shape and a probe run failed: {err}") from err
    completed = []
    for spec in specs:
        array = probe[spec.name]
        shape = spec.shape if spec.shape is not None else tuple(None for _ in array.shape)
        completed.append(lite.TensorSpec(spec.name, spec.dtype or array.dtype, shape))
    return completed


def check_batch_axis(outputs: dict[str, np.ndarray], batch_size: int, where: str) -> None:
    """Merged requests are split along the outputs' first axis: a model whose outputs do not
    lead with the batch (an OCR model's [sequence, batch, classes] declared [batch, sequence])
    is refused at load (:class:`ModelLoadError`, ``where`` naming the model), not in every
    merged request."""
    if batch_size < 2:
        return
    for name, array in outputs.items():
        shape = getattr(array, "shape", ())
        if not shape or shape[0] != batch_size:
            raise ModelLoadError(
                f"{where}: at batch size {batch_size} output {name!r} has "
                f"shape {list(shape)}, not the batch first; the model cannot be batched (set max_batch_size 0)"
            )
