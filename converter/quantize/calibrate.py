"""Calibration: run the float model on sample data and record what every activation holds.

Every float tensor computed at run time (graph inputs and node outputs of the main graph) becomes
an extra output of one run of the model per batch; its values update a :class:`TensorStats`
(running min/max, plus a streaming histogram for the percentile and entropy methods) and are
dropped, so memory holds one batch. The ranges then come from the chosen method
(:mod:`converter.quantize.methods`).
"""

from __future__ import annotations

from typing import Any

from converter.quantize.config import QuantConfig
from converter.quantize.data import DataSource, batches, describe_source
from converter.quantize.errors import CalibrationDataError
from converter.quantize.histogram import StreamingHistogram
from converter.quantize.methods import METHODS, TensorStats, needs_histogram
from converter.quantize.progress import ProgressCallback
from converter.quantize.runner import Runner, input_specs, with_outputs
from lite.errors import KernelError
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType


def activation_names(model: lite_ir.Model) -> list[str]:
    """Names of the float tensors of the main graph that are computed at run time."""
    graph = model.main
    indices = [i for i in graph.inputs if graph.tensors[i].data is None]
    for node in graph.nodes:
        indices.extend(i for i in node.outputs if i >= 0)
    names = []
    for index in indices:
        tensor = graph.tensors[index]
        if tensor.dtype == DataType.FLOAT and tensor.data is None and tensor.name not in names:
            names.append(tensor.name)
    return names


def collect_stats(model: lite_ir.Model, source: DataSource, config: QuantConfig, *,
                  spec: dict[str, Any] | None = None, progress: ProgressCallback | None = None,
                  engine: str = "auto", warnings: list[str] | None = None) -> tuple[dict[str, TensorStats], int]:
    """Observe every activation of ``model`` over at most ``config.calibration_size`` samples;
    return the statistics and the number of samples seen. Notes for the user (a model that
    rejected batches) go to ``warnings``. A model that computes no float32 value (a tree
    ensemble reading float64 features) has nothing to observe: no statistics, no sample read."""
    names = activation_names(model)
    if not names:  # ONNX Runtime refuses a run that requests no output
        return {}, 0
    runner = Runner(with_outputs(model, names), engine=engine)
    histogram = needs_histogram(config.calibration_method)
    stats = {name: TensorStats(histogram=StreamingHistogram() if histogram else None) for name in names}
    inputs = input_specs(model, config.whole_samples)
    seen = 0
    for batch in batches(source, inputs, config.batch_size, config.calibration_size, spec):
        try:
            outputs = runner.run(batch.feeds)
        except KernelError as err:
            raise CalibrationDataError(f"{err}{_rows_hint(inputs, config)}") from err
        for name in names:
            # Whole: not every activation has the batch first (YOLO's anchor grid is (anchors, 2), a
            # recurrent layer's (steps, batch, hidden)); cutting rows past the batch's size ranged
            # those by their first rows and clamped the rest. A padded batch's extra rows repeat
            # its last sample, which moves no minimum or maximum.
            stats[name].add(outputs[name])
        seen += batch.size
        if progress is not None:
            progress("calibrating (samples)", seen, config.calibration_size)
    if runner.one_at_a_time and warnings is not None:
        warnings.append(f"calibration: {runner.one_at_a_time}")
    if seen == 0:
        raise CalibrationDataError(f"calibration data {describe_source(source)} holds no samples")
    if progress is not None and seen < config.calibration_size:
        progress("calibrating (samples)", seen, seen)
    return stats, seen


def _rows_hint(inputs, config: QuantConfig) -> str:
    """What to try when the model refused a batch of calibration rows: its first axis may be no
    batch at all (a [time, features] sequence, cut into one-frame samples)."""
    if config.whole_samples or not any(spec.shape and not isinstance(spec.shape[0], int) for spec in inputs):
        return ""
    return ("; the calibration arrays were read as rows of samples along their first axis: if that axis is no "
            "batch (a [time, features] sequence), pass --calib-whole (whole_samples=True) to feed each array whole")


def ranges(stats: dict[str, TensorStats], config: QuantConfig) -> dict[str, tuple[float, float]]:
    """The range to quantize of every observed tensor, by the configured method."""
    method = METHODS[config.calibration_method]
    return {name: method(entry, config) for name, entry in stats.items() if entry.seen}
