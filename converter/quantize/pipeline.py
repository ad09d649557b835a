"""``quantize_model``: a lowered float .lite model in, the quantized model and its report out.

Order: calibrate (int8) → quantize everything the mode covers → evaluate on the eval data →
per-layer sensitivity → fall back layer by layer while the accuracy drop exceeds the budget.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Collection
from typing import Any

import numpy as np

from converter.quantize.calibrate import collect_stats, ranges
from converter.quantize.config import QuantConfig
from converter.quantize.data import DataSource, batches, is_image_folder
from converter.quantize.errors import (
    AccuracyBudgetError,
    CalibrationDataError,
    QuantizationOptionError,
    QuantizedModelRejectedError,
)
from converter.quantize.evaluate import EvalSet, compare, cosine
from converter.quantize.preprocessing import METADATA_KEY, bind_spec, read_spec
from converter.quantize.progress import ProgressCallback, resolve
from converter.quantize.quantizers import LAYER_OPS
from converter.quantize.report import QuantizationReport
from converter.quantize.runner import input_specs, onnxruntime_available
from converter.quantize.sensitivity import fallback, layer_sensitivity
from converter.quantize.static import QuantizedGraph, quantize_static
from converter.quantize.unfuse import unfuse_activations
from converter.quantize.weights import DYNAMIC_LAYERS, quantize_dynamic, quantize_weights_only
from lite.format import ir as lite_ir

QUANTIZATION_KEY = "quantization"


def quantize_model(
    model: lite_ir.Model,
    config: QuantConfig,
    *,
    calibration_data: DataSource | None = None,
    eval_data: DataSource | None = None,
    preprocessing: str | dict[str, Any] | None = None,
    progress: bool | ProgressCallback | None = None,
    engine: str = "auto",
    check_data: DataSource | None = None,
) -> tuple[lite_ir.Model, QuantizationReport]:
    """Quantize ``model`` (not modified) as ``config`` says; see docs/quantization.md.

    ``check_data`` (the conversion's verification inputs) is what int8-dynamic and int8-weight
    are checked on without ``eval_data`` when no calibration data is given either; inputs are
    synthesized when it is None."""
    started = time.perf_counter()
    report_progress = resolve(progress)
    spec = read_spec(preprocessing)
    inputs = input_specs(model, config.whole_samples)
    spec, spec_note = _image_preprocessing(spec, model, (calibration_data, eval_data))
    unfused: list[str] = []
    if config.mode == "int8":  # before calibration: the pre-activation tensors get measured ranges
        model, unfused = unfuse_activations(model)
    elif config.mode == "int8-dynamic":
        model, unfused = unfuse_activations(model, DYNAMIC_LAYERS)
    if spec:
        bind_spec(spec, [(i.name, i.dtype, i.shape) for i in inputs])  # fail early on a bad spec
    if config.max_accuracy_drop is not None and eval_data is None:
        raise AccuracyBudgetError(
            f"max_accuracy_drop={config.max_accuracy_drop} needs evaluation data: pass --eval DATA (eval_data=...)"
        )
    engine = engine if engine != "auto" else ("ort" if onnxruntime_available() else "numpy")
    report = QuantizationReport(mode=config.mode, options=config.to_dict(), calibration_engine=engine)
    if spec_note:
        report.warnings.append(spec_note)
    if unfused:
        report.warnings.append(f"{len(unfused)} layer(s) with a HardSwish, SiLU, Sigmoid or similar fused activation "
                               "run in int8 with the activation in float between them")
    build = _builder(model, config, calibration_data, spec, report, report_progress, engine)

    quantized = build(None, ())
    if eval_data is not None:
        evalset = EvalSet(model, list(batches(eval_data, inputs, config.batch_size, config.eval_size, spec)), engine)
        evaluation = evalset.evaluate(quantized.model)
        layers = _layers(model, quantized)
        if layers and (config.max_accuracy_drop is not None or len(layers) <= 64):
            report.sensitivity = layer_sensitivity(build, layers, evalset, config.sensitivity_size, report_progress)
        if config.max_accuracy_drop is not None:
            quantized, evaluation, report.kept_in_float, report.fallback_steps = fallback(
                build, report.sensitivity, evalset, config.max_accuracy_drop, (quantized, evaluation)
            )
            report.budget_met = evaluation.drop <= config.max_accuracy_drop
        report.evaluation = evaluation
    elif quantized.quantized:
        source = _check_source(config, calibration_data, check_data, inputs)
        if source is not None:
            _checked(model, quantized.model, source, inputs, config, spec, engine, report)
    report.quantized_nodes = quantized.quantized
    report.declined = quantized.declined
    report.removed_activations = quantized.removed
    report.warnings.extend(w for w in quantized.warnings if w not in report.warnings)
    if not quantized.quantized and not report.kept_in_float:
        report.warnings.insert(0, nothing_quantized(config.mode, quantized.declined))
    result = quantized.model
    result.metadata[QUANTIZATION_KEY] = json.dumps(
        {**config.to_dict(), "kept_in_float": report.kept_in_float}, sort_keys=True
    )
    if spec:
        result.metadata[METADATA_KEY] = json.dumps(spec, sort_keys=True)
    report.seconds = time.perf_counter() - started
    return result, report


NOTHING_QUANTIZED = "quantized no node"  # the start of the warning below, which the CLI also prints with --quiet
_REASONS_SHOWN = 3


def nothing_quantized(mode: str, declined: list[tuple[str, str, str]]) -> str:
    """The warning for a quantization that changed nothing: the file would be the float model,
    as large as without ``--quant``, and only this says so."""
    head = f"--quant {mode} {NOTHING_QUANTIZED}: the output is the float model, no smaller"
    if not declined:
        return f"{head}; the model has no layer this mode quantizes (docs/quantization.md lists them)"
    first: dict[str, str] = {}
    for node, op_type, reason in declined:
        first.setdefault(reason, f"{op_type} {node!r}" if node else f"an unnamed {op_type}")
    shown = "; ".join(f"{where}: {reason}" for reason, where in list(first.items())[:_REASONS_SHOWN])
    return f"{head}; {len(declined)} layer(s) stayed float, e.g. {shown} (all in the report's 'declined')"


CHECK_SAMPLES = 8  # calibration samples the quantized model is checked on when no --eval is given
CHECK_COSINE = 0.99  # an output below it against the float model is reported
CHECK_EXACT = 0.99  # an integer/boolean output with fewer elements equal to the float model's is reported
CHECK_DROP_PP = 100 * (1 - CHECK_COSINE)  # a classifier's top-1 drop above it is reported


def _check_source(config: QuantConfig, calibration_data, check_data, inputs) -> tuple[str, DataSource] | None:
    """What the quantized model is checked on without evaluation data, and what to call it: the
    calibration samples; for int8-dynamic and int8-weight (no calibration needed) the
    verification inputs, else synthesized ones. None where static int8's data is an iterator,
    which calibration consumed."""
    if isinstance(calibration_data, (str, os.PathLike, list, tuple)):
        return "calibration", calibration_data
    if config.mode == "int8":
        return None
    if isinstance(check_data, (str, os.PathLike)) and str(check_data).lower().endswith(".npz"):
        with np.load(check_data) as arrays:
            return "verification", [dict(arrays)]
    if check_data is not None:
        return "verification", check_data
    return "synthesized", [synthesized_inputs(inputs)]


def synthesized_inputs(inputs) -> dict[str, np.ndarray]:
    """CHECK_SAMPLES rows of random inputs as the converter's verification makes them (normal
    floats, integers 0-3: ids any vocabulary has), unknown dimensions 1."""
    rng = np.random.default_rng(0)
    feeds = {}
    for spec_ in inputs:
        dims = [dim if isinstance(dim, int) and dim > 0 else 1 for dim in spec_.shape]
        if dims and not spec_.whole and not isinstance(spec_.shape[0], int):
            dims[0] = CHECK_SAMPLES
        if spec_.dtype.kind == "f":
            feeds[spec_.name] = rng.standard_normal(dims).astype(spec_.dtype)
        else:
            feeds[spec_.name] = rng.integers(0, 2 if spec_.dtype.kind == "b" else 4, size=dims).astype(spec_.dtype)
    return feeds


def _checked(model, quantized: lite_ir.Model, source: tuple[str, DataSource], inputs, config: QuantConfig, spec,
             engine: str, report: QuantizationReport) -> None:
    """Run the check; it is advisory: the quantized model is written whatever happens to it."""
    try:
        _check_on_samples(model, quantized, source, inputs, config, spec, engine, report)
    except QuantizedModelRejectedError:
        raise
    except Exception as err:
        report.warnings.append(f"the {config.mode} model could not be checked against the float one on {source[0]} "
                               f"samples ({type(err).__name__}: {str(err)[:200]}); give --eval DATA to measure it")


def _check_on_samples(model, quantized: lite_ir.Model, source: tuple[str, DataSource], inputs, config: QuantConfig,
                      spec, engine: str, report: QuantizationReport) -> None:
    """Without evaluation data, the quantized model against the float one on a few samples
    (calibration, verification or synthesized ones): not a measure of accuracy, but a
    quantization that ruins an output, or a part of one (a shared scale that rounds a detector's
    scores to 0 beside its box coordinates; per-tensor weights that leave a MobileNet's embedding
    at cosine 0.26), shows, with a warning."""
    described, data = source
    checked = list(batches(data, inputs, config.batch_size, CHECK_SAMPLES, spec))
    if not checked:
        return
    evalset = EvalSet(model, checked, engine)
    results = evalset.run(quantized)
    evaluation = compare(evalset.float_outputs, results)
    evaluation.samples = evalset.samples
    report.evaluation, report.evaluated_on = evaluation, described
    report.warnings.extend(accuracy_warnings(evalset.float_outputs, results, evaluation,
                                             f"{evaluation.samples} {described} samples", _advice(config)))


def _advice(config: QuantConfig) -> str:
    advice = "give --eval DATA with --max-accuracy-drop PP to keep the layers that cost most in float"
    if config.mode == "int8":
        return advice + ", or --quant int8-dynamic"
    return advice if config.per_channel else advice + ", or drop --per-tensor (per-channel weight scales)"


def accuracy_warnings(reference: dict[str, np.ndarray], results: dict[str, np.ndarray], evaluation,
                      samples: str, advice: str) -> list[str]:
    """One warning per output the int8 model ruins against the float one: a float output (or a
    slice of it) below CHECK_COSINE, an integer or boolean one (ids, masks) below CHECK_EXACT
    matching elements, and a classifier whose top-1 class changed on more than the drop that
    CHECK_COSINE stands for."""
    found = []
    for metrics in evaluation.outputs:
        if metrics.exact is not None:
            if metrics.exact < CHECK_EXACT:
                found.append(f"int8 output {metrics.name!r} matches the float model's in {100 * metrics.exact:.2f}% of "
                             f"its elements on {samples} (below {100 * CHECK_EXACT:.0f}%): {advice}")
            continue
        where, value = _worst_part(np.asarray(reference[metrics.name], np.float64),
                                   np.asarray(results[metrics.name], np.float64))
        if value < CHECK_COSINE:
            found.append(f"int8 output {metrics.name!r}{where} has cosine {value:.4f} against the float model on "
                         f"{samples} (below {CHECK_COSINE}): {advice}")
    if evaluation.top1_agreement is not None and evaluation.drop > CHECK_DROP_PP:
        found.append(f"int8 top-1 class differs from the float model's on {evaluation.drop:.2f}% of {samples} "
                     f"(above {CHECK_DROP_PP:.0f} pp): {advice}")
    return found


_PART_AXIS = 16  # axes of at most this many entries (but the batch's) are checked part by part


def _worst_part(reference: np.ndarray, got: np.ndarray) -> tuple[str, float]:
    """The lowest cosine of the whole output and of each slice along its short axes (a detector's
    6 values per box: the score column alone), and where it is ("" for the whole)."""
    worst = ("", cosine(reference.reshape(-1), got.reshape(-1)))
    for axis in range(1, reference.ndim):
        if not 1 < reference.shape[axis] <= _PART_AXIS:
            continue
        for index in range(reference.shape[axis]):
            part = cosine(np.take(reference, index, axis).reshape(-1), np.take(got, index, axis).reshape(-1))
            if part < worst[1]:
                worst = (f" (index {index} of axis {axis})", part)
    return worst


def _builder(model, config: QuantConfig, calibration_data, spec, report: QuantizationReport,
             progress: ProgressCallback, engine: str):
    if config.mode == "int8":
        if calibration_data is None:
            raise QuantizationOptionError(
                "--quant int8 needs calibration data: pass --calib DATA (a folder of .npy/.npz files or images) "
                "or calibration_data=<iterable of arrays>; or use --quant int8-dynamic / int8-weight"
            )
        stats, report.calibration_samples = collect_stats(model, calibration_data, config, spec=spec,
                                                          progress=progress, engine=engine,
                                                          warnings=report.warnings)
        calibrated = ranges(stats, config)

        def build(include: Collection[str] | None, exclude: Collection[str]) -> QuantizedGraph:
            return quantize_static(model, calibrated, config, include=include, exclude=exclude)

        return build
    if config.mode in ("int8-dynamic", "int8-weight"):
        quantize = quantize_dynamic if config.mode == "int8-dynamic" else quantize_weights_only

        def build(include: Collection[str] | None, exclude: Collection[str]) -> QuantizedGraph:
            keep = set(exclude) | set(config.exclude)
            if include is not None:
                keep |= {n.name for n in model.main.nodes if n.name not in include}
            return quantize(model, dataclasses.replace(config, exclude=tuple(keep)))

        return build
    raise QuantizationOptionError(f"quantize_model does not handle mode {config.mode!r} (fp16 is a converter pass)")


def _layers(model: lite_ir.Model, quantized: QuantizedGraph) -> list[tuple[str, str]]:
    op_of = {node.name: node.op_type for node in model.main.nodes}
    return [(name, op_of.get(name, "")) for name in quantized.quantized if op_of.get(name) in LAYER_OPS]


def _image_preprocessing(spec: dict[str, Any], model: lite_ir.Model, sources) -> tuple[dict[str, Any], str | None]:
    """The spec that prepares image folders, and a note when it came from the model.

    Without one, images would be fed as raw pixels, unlike anything the model saw in training:
    calibrated on those, a digits LeNet lost a third of its accuracy with no warning. So an image
    folder needs ``--preprocess`` or the model's own ``preprocessing`` metadata.
    """
    if spec:
        return spec, None
    images = [source for source in sources if source is not None and is_image_folder(source)]
    if not images:
        return spec, None
    stored = model.metadata.get(METADATA_KEY)
    if stored:
        return read_spec(stored), "calibration images prepared as the model's own 'preprocessing' metadata says"
    raise CalibrationDataError(
        f"{images[0]} holds images, and neither --preprocess nor the model's 'preprocessing' metadata says how "
        "to turn them into inputs (size, mean and std, scale, layout): calibrated on raw pixels, int8 loses "
        "much of the model's accuracy. Pass --preprocess SPEC (preprocessing=..., see docs/quantization.md) "
        "or a folder of prepared .npy/.npz arrays"
    )
