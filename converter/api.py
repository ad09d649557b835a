"""The converter's Python API: ``convert`` (file in, file out, report) and ``convert_model``.

``convert`` is what ``lite convert`` runs::

    report = converter.convert("resnet18.onnx", "resnet18.lite", fp16=True, report_path="r.json")
    report = converter.convert("resnet18.onnx", "resnet18.lite", quant="int8", calibration_data="calib/",
                               eval_data="eval/", max_accuracy_drop=0.5)   # see docs/quantization.md

``convert_model`` stops at the in-memory .lite model (``lite.format.ir.Model``) and checks
nothing against the runtime's kernels; with ``optimize=False`` it is the plain, lossless
translation of any ONNX model, which the runtime's conformance suite uses. The output file and
the metadata it records are written by :mod:`converter.output`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from converter.errors import InvalidOptionError, VerificationError
from converter.import_checks import training_mode_notes
from converter.importer import (
    ImportedModel,
    ModelSource,
    check_model_file,
    import_onnx,
)
from converter.input_shapes import apply_input_shapes
from converter.lower import lower_model
from converter.mindspore import import_mindspore, is_mindspore_source
from converter.options import ConvertOptions, GraphOptions, QuantizeOptions, SourceOptions
from converter.output import (
    converter_version,
    model_metadata,
    preprocessing_metadata,
    record_sample_shapes,
    write_output,
)
from converter.passes import DEFAULT_PASSES, PassContext, PassResult, run_passes, store_weights_fp16
from converter.quantize.config import QuantConfig
from converter.quantize.pipeline import quantize_model
from converter.quantize.report import QuantizedConversionReport
from converter.quantize.source_opset import prepare_source_opset
from converter.reference import original_proto
from converter.reference_session import onnxruntime_available
from converter.report import ConversionReport, GraphStats
from converter.verify_output import failure_message, verify_output
from lite.atomic import atomic_path
from lite.compare import Tolerance
from lite.format import ir as lite_ir

OUTPUT_FORMATS = (".lite", ".onnx")


def optimize_model(
    model: ir.Model,
    *,
    optimize: bool = True,
    input_shapes: dict[str, list[int | str]] | None = None,
    dynamic_batch: bool = False,
    fp16: bool = False,
    fp16_io: bool = False,
) -> tuple[list[PassResult], list[str]]:
    """Apply shape options and the passes to ``model`` in place; return pass results and warnings."""
    context = PassContext()
    context.warnings.extend(apply_input_shapes(model, input_shapes or {}, dynamic_batch))
    passes = list(DEFAULT_PASSES) if optimize else []
    if fp16 or fp16_io:
        passes.append(_fp16_pass(fp16_io))
    results = run_passes(model, tuple(passes), context)
    return results, context.warnings


def _fp16_pass(fp16_io: bool):
    def store_weights_fp16_pass(model: ir.Model, context: PassContext) -> PassResult:
        return store_weights_fp16(model, context, fp16_io=fp16_io)

    store_weights_fp16_pass.name = "store_weights_fp16"  # type: ignore[attr-defined]
    return store_weights_fp16_pass


def convert_model(
    model: ModelSource,
    *,
    optimize: bool = True,
    input_shapes: dict[str, list[int | str]] | None = None,
    dynamic_batch: bool = False,
    fp16: bool = False,
    fp16_io: bool = False,
    network: str | None = None,
    network_input_shape: Sequence[int] | None = None,
    dec_key: bytes | None = None,
    dec_mode: str | None = None,
    external_data_dir: str | os.PathLike | None = None,
) -> lite_ir.Model:
    """Convert a model to a .lite in-memory model: ONNX (path, bytes, ModelProto or
    onnx_ir.Model), a MindSpore .mindir path, or a .ckpt path with ``network`` (see ``convert``,
    also for ``external_data_dir``)."""
    source = SourceOptions(network, network_input_shape, dec_key, dec_mode, external_data_dir)
    graph = GraphOptions(optimize, input_shapes, dynamic_batch, fp16, fp16_io)
    imported, _, _ = _import_source(model, source, allow_custom=False)
    _optimize(imported.model, graph)
    return lower_model(imported.model, model_metadata(imported, graph.recorded()))


def _check_not_the_source(model: ModelSource, output: Path) -> None:
    """InvalidOptionError when ``output`` is the model's own file (by another name or link too):
    the atomic write would replace the source with its conversion, and the original is gone."""
    if not isinstance(model, (str, os.PathLike)) or not output.exists():
        return
    try:
        same = os.path.samefile(model, output)
    except OSError:  # the source is missing: its import says so
        return
    if same:
        raise InvalidOptionError(f"output {output} is the model file {os.fspath(model)} itself: the conversion would "
                                 "replace the original; name another output path")


def convert(
    model: ModelSource,
    output_path: str | os.PathLike,
    *,
    options: ConvertOptions | None = None,
    **keywords: Any,
) -> ConversionReport:
    """Convert ``model`` and write ``output_path`` (.lite or .onnx) atomically.

    Options are keywords named as the fields of :class:`converter.options.ConvertOptions`'s
    groups, or ``options=`` (keywords given as well replace its values):

    - the source (:class:`~converter.options.SourceOptions`): the input format follows the file
      extension: ONNX, MindSpore ``.mindir`` (``dec_key`` and ``dec_mode`` for encrypted files),
      or a ``.ckpt`` checkpoint with ``network`` (``module:Callable`` building a train-core Cell)
      and ``network_input_shape`` (the sample input's shape). ONNX weights stored in external data
      files are read from the model file's folder only (never through an absolute path, ``..`` or
      a symlink leading out of it). A model given as bytes or an ``onnx.ModelProto`` has no
      folder: ``external_data_dir`` names the folder its external data is in; without it such a
      model's external data is refused (:class:`ModelImportError`).
    - the graph (:class:`~converter.options.GraphOptions`): ``optimize``, ``input_shapes``,
      ``dynamic_batch``, ``fp16``, ``fp16_io``, ``allow_custom``.
    - verification (:class:`~converter.options.VerifyOptions`): ``verify=None`` verifies when
      onnxruntime is installed (:mod:`converter.verify`): on inputs planned from the graph, or on
      ``verify_data`` (a .npz file, a folder in the calibration format, or an iterable of input
      dicts). Raises :class:`UnsupportedOpsError` listing every node the runtime cannot run
      (unless ``allow_custom``), and :class:`VerificationError` when an output differs by more
      than ``rtol`` of its peak (default 1e-4, or 1e-2 with fp16 weights), ``atol`` (default
      1e-6, or 1e-3) and the reference's own spread, naming the first node that diverges; in both
      cases no output file is left behind. ``custom_op_libraries`` (paths of shared libraries of
      custom ops, e.g. onnxruntime-extensions' ``get_library_path()``) are registered with ONNX
      Runtime for the original and the converted model. When the check cannot run (ONNX Runtime cannot load or
      run the original on any inputs it can make), the output is written and
      ``report.verification`` says ``skipped`` and why.
    - quantization (:class:`~converter.options.QuantizeOptions`, docs/quantization.md): ``quant``
      is ``"int8"`` (static; needs ``calibration_data``: a folder of .npy/.npz files or images, or
      an iterable of arrays), ``"int8-dynamic"``, ``"int8-weight"`` or ``"fp16"``. ``eval_data``
      adds the accuracy report (``report.quantization``); ``max_accuracy_drop`` (percentage
      points) keeps the most sensitive layers in float until it holds; ``calibration_data``
      without ``quant="int8"`` and ``eval_data`` or ``max_accuracy_drop`` without an int8 mode
      are :class:`InvalidOptionError`. ``preprocessing`` (the image spec, JSON/dict/path) is
      checked against the model's inputs and stored in the model's ``preprocessing`` metadata
      for serving, with or without ``quant``; int8 also prepares image folders with it. ``quant_options`` sets further
      :class:`converter.quantize.config.QuantConfig` fields (``activation_type``, ``percentile``,
      ``exclude``, ...). Quantized models are checked by the quantization report rather than by
      ``verify``.
    - ``report_path``: where the report is also written as JSON (on failure too).
    """
    started = time.perf_counter()
    options = (options or ConvertOptions()).replace(**keywords)
    output = Path(output_path)
    suffix = output.suffix.lower()
    if output.is_dir():
        raise InvalidOptionError(f"output {output} is a directory; name the file to write, e.g. {output / 'model.lite'}")
    if suffix not in OUTPUT_FORMATS:
        raise InvalidOptionError(
            f"output {output}: the extension must be .lite or .onnx, got {repr(suffix) if suffix else 'none'}")
    folder = output.parent
    if not folder.is_dir():
        # Said before the conversion, not after it, where the write fails on a temporary name.
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InvalidOptionError(f"output {output}: the folder {folder} {what}; create it or name another output path")
    _check_not_the_source(model, output)
    quant_config = options.quantization.config()
    options = options.settled()
    graph, quantization = options.graph, options.quantization
    verify = options.verification.verify
    if verify is None:
        verify = onnxruntime_available() and not quantization.is_int8
    recorded = graph.recorded()
    if quant_config is not None:
        recorded["quant"] = quant_config.to_dict()

    imported, translated, source_warnings = _import_source(model, options.source, graph.allow_custom)
    # Weights already float16 round as an fp16 conversion's do: ONNX Runtime runs some of their
    # nodes with float16 kernels (its fused layer norms), the numpy engine all in float32.
    tolerance = options.verification.tolerance(graph.fp16 or _has_float16_weights(imported.model))
    source_warnings += prepare_source_opset(
        imported, inserts_standard_ops=graph.fp16 or graph.fp16_io or quantization.is_int8,
        raise_for_int8=(quant_config is not None and quantization.is_int8 and translated is None
                        and (quant_config.per_channel or quant_config.mode == "int8-dynamic")))
    if translated is not None:
        original = translated
        recorded["input_format"] = "ckpt" if options.source.network is not None else "mindir"
        if options.source.network is not None:
            recorded["network"] = options.source.network
    else:
        original = original_proto(imported, model) if verify else None
    report_class = ConversionReport if quant_config is None else QuantizedConversionReport
    report = report_class(
        source=imported.source,
        output=str(output),
        output_format=suffix[1:],
        source_sha256=imported.sha256,
        converter_version=converter_version(),
        options=recorded,
        before=GraphStats.of(imported.model),
    )
    report.passes, report.warnings = _optimize(imported.model, graph)
    report.warnings[:0] = source_warnings
    report.after = GraphStats.of(imported.model)
    quantize = _quantizer(quantization, quant_config, report, options.verification.verify_data)
    # int8 modes check and store the spec with the calibration that reads it (quantize_model).
    preprocessing = None if quantization.is_int8 else preprocessing_metadata(quantization.preprocessing, imported.model)
    try:
        # lite.atomic: a hidden, exclusively created temporary file beside the output, verified
        # there and renamed over it, so the output appears complete or not at all (even after a
        # hard kill).
        with atomic_path(output) as temporary:
            exported, written = write_output(imported, report, temporary, suffix, recorded, graph.allow_custom,
                                             quantize, preprocessing)
            if verify:
                _verify(report, original, imported, exported, temporary, suffix, options, tolerance)
                record_sample_shapes(written, report.verification, temporary)
    except BaseException:
        _finish(report, started, options.report_path, written=False)
        raise
    _finish(report, started, options.report_path, written=True)
    return report


def _finish(report: ConversionReport, started: float, report_path: str | os.PathLike | None, written: bool) -> None:
    """Time the conversion and write the JSON report, which names no output when none was written."""
    report.seconds = time.perf_counter() - started
    if report_path is not None:
        if not written:
            report.output = None
        report.write_json(report_path)


def _optimize(model: ir.Model, graph: GraphOptions) -> tuple[list[PassResult], list[str]]:
    return optimize_model(model, optimize=graph.optimize, input_shapes=graph.input_shapes,
                          dynamic_batch=graph.dynamic_batch, fp16=graph.fp16, fp16_io=graph.fp16_io)


def _quantizer(quantization: QuantizeOptions, config: QuantConfig | None, report: ConversionReport,
               verify_data: Any = None) -> Callable[[lite_ir.Model], lite_ir.Model] | None:
    """The int8 rewrite of the lowered model, which also fills ``report.quantization``."""
    if config is None:
        return None
    if not quantization.is_int8:
        return None

    def quantize(lite_model: lite_ir.Model) -> lite_ir.Model:
        quantized, report.quantization = quantize_model(
            lite_model, config, calibration_data=quantization.calibration_data, eval_data=quantization.eval_data,
            preprocessing=quantization.preprocessing, progress=quantization.progress,
            check_data=verify_data,
        )
        return quantized

    return quantize


def _verify(report: ConversionReport, original: onnx.ModelProto | None, imported: ImportedModel,
            exported: onnx.ModelProto | None, temporary: Path, suffix: str, options: ConvertOptions,
            tolerance: Tolerance) -> None:
    """Compare the written file with the original; a mismatch raises :class:`VerificationError`."""
    report.verification = verification = verify_output(
        original, imported.model, exported, temporary, suffix, options.graph.fp16_io, tolerance,
        options.graph.input_shapes, options.verification.verify_data, options.graph.dynamic_batch,
        options.verification.libraries(),
    )
    report.warnings.extend(f"verification: {note}" for note in verification.notes)
    if verification.skipped:
        report.warnings.append(f"verification skipped: {verification.reason}")
    elif not verification.passed:
        raise VerificationError(failure_message(verification))


def _has_float16_weights(model: ir.Model) -> bool:
    """Whether the model is a float16 model: float16 holds most of its float weights' elements
    (one float16 constant in a float32 model does not loosen its check)."""
    counts = {ir.DataType.FLOAT16: 0, ir.DataType.FLOAT: 0, ir.DataType.BFLOAT16: 0, ir.DataType.DOUBLE: 0}
    for value in model.graph.initializers.values():
        if value.dtype in counts and value.shape is not None and value.shape.is_static():
            counts[value.dtype] += int(np.prod(value.shape.numpy()))
    return counts[ir.DataType.FLOAT16] > sum(counts.values()) / 2


def _import_source(
    model: ModelSource, source: SourceOptions, allow_custom: bool
) -> tuple[ImportedModel, onnx.ModelProto | None, list[str]]:
    """Dispatch on the input format: ONNX, or MindSpore (.mindir; .ckpt with a network), which is
    translated to ONNX first (returned too: the reference that verification runs)."""
    if isinstance(model, (str, os.PathLike)):
        check_model_file(Path(model))
    if is_mindspore_source(model, source.network):
        if not isinstance(model, (str, os.PathLike)):
            raise InvalidOptionError("MindSpore inputs are converted from a file path (.mindir, .ckpt)")
        if source.external_data_dir is not None:
            raise InvalidOptionError(
                "external_data_dir applies to ONNX models; a .mindir's external weights are read from "
                "the <name>_variables folder next to it"
            )
        return import_mindspore(
            model,
            network=source.network,
            input_shape=source.network_input_shape,
            dec_key=source.dec_key,
            dec_mode=source.dec_mode,
            allow_custom=allow_custom,
        )
    if source.dec_key is not None:
        raise InvalidOptionError("dec_key applies to encrypted MindSpore files (.mindir, .ckpt) only")
    imported = import_onnx(model, source.external_data_dir)
    return imported, None, imported.notes() + training_mode_notes(imported.model)
