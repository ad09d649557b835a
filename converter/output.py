"""Writing a conversion's output file: the .lite or .onnx bytes and the metadata they carry.

``convert`` (:mod:`converter.api`) decides what to convert and checks it; this module turns the
optimized graph into the file, which is a separate concern with its own rules: which nodes the
runtime cannot run (refused, or kept as custom ops), the provenance every file records (source,
its hash, the converter's version and options), the image preprocessing spec serving reads, and
the input shapes verification ran on, recorded for the runtime's measurements.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from converter.dict_inputs import feature_names_metadata
from converter.errors import InvalidOptionError, UnsupportedOpsError
from converter.importer import ImportedModel
from converter.lower import lower_model
from converter.onnx_export import serialize, to_onnx
from converter.report import ConversionReport
from converter.support import (
    ONNX_RUNTIME_DOMAINS,
    onnx_runtime_ops_warning,
    unsupported_domains,
    unsupported_nodes,
)
from converter.zipmap import class_labels_metadata
from lite.errors import PreprocessingError
from lite.format import ir as lite_ir
from lite.format import save
from lite.preprocessing import METADATA_KEY as PREPROCESSING_KEY
from lite.preprocessing import ImagePreprocessing
from lite.preprocessing import read_spec as read_preprocessing_spec
from lite.signature import SAMPLE_SHAPES_KEY, SAMPLE_VALUES_KEY

CUSTOM_OPS_KEY = "lite.custom_ops"


def converter_version() -> str:
    try:
        return importlib_metadata.version("lite-toolchain")
    except importlib_metadata.PackageNotFoundError:
        return "0.1.0"


def write_output(
    imported: ImportedModel,
    report: ConversionReport,
    temporary: Path,
    suffix: str,
    options: dict[str, Any],
    allow_custom: bool,
    quantize: Callable[[lite_ir.Model], lite_ir.Model] | None = None,
    preprocessing: str | None = None,
) -> tuple[onnx.ModelProto | None, lite_ir.Model | None]:
    """Write the output to ``temporary``; return the ONNX export when one was made, and the .lite
    model when that was written.

    ``quantize`` (int8 modes) rewrites the lowered .lite model; a quantized .onnx output is that
    model lowered back to ONNX (QDQ form) as the runtime's ONNX Runtime engine does.
    ``preprocessing`` (the checked spec as JSON) goes into the ``preprocessing`` metadata.
    """
    if suffix == ".onnx" and quantize is None:
        exported = to_onnx(imported.model)
        if preprocessing is not None:
            onnx.helper.set_model_props(exported, {**{p.key: p.value for p in exported.metadata_props},
                                                   PREPROCESSING_KEY: preprocessing})
        _write_bytes(temporary, serialize(exported))
        return exported, None
    lite_model = lower_model(imported.model, model_metadata(imported, options))
    if preprocessing is not None:
        lite_model.metadata[PREPROCESSING_KEY] = preprocessing
    if quantize is not None:
        lite_model = quantize(lite_model)
    if suffix == ".onnx":
        from lite.format.onnx.lower import lower_model as lower_to_onnx

        exported = lower_to_onnx(lite_model, external_weights=False).model
        _write_bytes(temporary, serialize(exported))
        return exported, None
    unsupported = unsupported_nodes(lite_model)
    domains = unsupported_domains(lite_model) if unsupported else set()
    if unsupported and not allow_custom and domains <= ONNX_RUNTIME_DOMAINS:
        # ONNX Runtime's own ops (its quantizer and optimizer write them): its engines run them.
        report.warnings.append(onnx_runtime_ops_warning(unsupported, domains))
        allow_custom = True
    if unsupported and not allow_custom:
        listing = "\n".join(f"  {name}: {op} — {reason}" for name, op, reason in unsupported)
        raise UnsupportedOpsError(
            f"{len(unsupported)} node(s) use ops the lite runtime cannot run:\n{listing}\n"
            "Pass --allow-custom (allow_custom=True) to keep them as custom nodes for the runtime's "
            "custom-op mechanism, or write .onnx instead.",
            unsupported,
        )
    if unsupported:
        report.custom_ops = unsupported
        report.warnings.append(f"{len(unsupported)} node(s) kept as custom ops (see custom_ops)")
        lite_model.metadata[CUSTOM_OPS_KEY] = json.dumps([name for name, _, _ in unsupported])
    save(lite_model, temporary)
    return None, lite_model


def record_sample_shapes(model: lite_ir.Model | None, verification: Any, path: Path) -> None:
    """Write ``model`` again with the input shapes its verification ran on, where an input has
    symbolic sizes beyond its batch dimension (``lite.signature.SAMPLE_SHAPES_KEY``): what the
    runtime measures at load (the ONNX Runtime engine's thread and int8 choices), autotuning and
    ``lite bench`` then make random inputs of sizes the model runs on, not a 1x1 image or a
    one-token text. One-element integer and boolean inputs keep their values
    (``SAMPLE_VALUES_KEY``): a sample rate the graph compares with 16000 is 16000 there, not a
    random integer that takes another branch. Only inputs the original and the converted model
    both ran on are recorded."""
    if model is None or verification is None or not verification.passed or not verification.feeds:
        return
    shapes, values = {}, {}
    for index in model.main.inputs:
        tensor = model.main.tensors[index]
        value = verification.feeds.get(tensor.name)
        if (tensor.shape and isinstance(value, np.ndarray) and value.ndim == len(tensor.shape)
                and any(not isinstance(d, int) for d in tensor.shape[1:])):
            shapes[tensor.name] = [int(d) for d in value.shape]
        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iub":
            values[tensor.name] = value.item()
    if shapes:
        model.metadata[SAMPLE_SHAPES_KEY] = json.dumps(shapes, sort_keys=True)
    if values:
        model.metadata[SAMPLE_VALUES_KEY] = json.dumps(values, sort_keys=True)
    if shapes or values:
        save(model, path)


def preprocessing_metadata(spec: str | os.PathLike | dict[str, Any] | None, model: ir.Model) -> str | None:
    """The image preprocessing spec checked against the model's inputs, as stored in its
    ``preprocessing`` metadata (lite.preprocessing, which serving reads); None without one."""
    inputs = [_ImageInput(value) for value in model.graph.inputs if value.name not in model.graph.initializers]
    try:
        raw = read_preprocessing_spec(spec)
        if not raw:
            return None
        return ImagePreprocessing.from_spec(raw, inputs).to_json()
    except PreprocessingError as err:
        raise InvalidOptionError(f"--preprocess (preprocessing=): {err}") from err


class _ImageInput:
    """An ONNX graph input as lite.preprocessing describes one: name, numpy dtype, shape."""

    def __init__(self, value: ir.Value) -> None:
        self.name = value.name
        self.dtype = value.dtype.numpy() if value.dtype is not None else None
        self.shape = tuple(dim if isinstance(dim, int) else str(dim) for dim in value.shape) if value.shape else None


def _write_bytes(path: Path, data: bytes) -> None:
    # ``path`` is the temporary file lite.atomic created; it fsyncs it before the rename.
    with open(path, "wb") as stream:
        stream.write(data)


def model_metadata(imported: ImportedModel, options: dict[str, Any]) -> dict[str, str]:
    """The provenance a converted model records: producer, source and its hash, converter and options."""
    model = imported.model
    producer = " ".join(p for p in (model.producer_name, model.producer_version) if p)
    return {
        **class_labels_metadata(imported.zipped),
        **feature_names_metadata(imported.vectorized),
        "producer": producer,
        # A file name need not be UTF-8 (a latin-1 "mod\xe8le.onnx" reads as a surrogate escape)
        # and metadata is: the name as UTF-8, its undecodable bytes replaced.
        "source": os.fsencode(os.path.basename(imported.source)).decode("utf-8", "replace"),
        "source_sha256": imported.sha256,
        "source_ir_version": str(model.ir_version),
        "converter": "lite.converter",
        "converter_version": converter_version(),
        "converter_options": json.dumps(options, sort_keys=True),
    }
