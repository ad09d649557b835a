"""The options of ``converter.convert``, in four groups.

``convert`` takes them either as keywords, as ``lite convert``'s options and most callers pass
them::

    converter.convert("m.onnx", "m.lite", fp16=True, rtol=1e-3)

or grouped, to build once and reuse (keywords given as well replace the grouped values)::

    options = ConvertOptions(graph=GraphOptions(fp16=True), verification=VerifyOptions(rtol=1e-3))
    converter.convert("m.onnx", "m.lite", options=options)

Every field is named exactly as its keyword, so the two spellings are one list.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from converter.errors import InvalidOptionError
from converter.quantize.config import QuantConfig
from lite.compare import Tolerance


@dataclass(frozen=True)
class SourceOptions:
    """How the input is read: MindSpore checkpoints and encrypted files, ONNX external data."""

    network: str | None = None  # ``module:Callable`` building the Cell of a .ckpt
    network_input_shape: Sequence[int] | None = None  # the sample input's shape for ``network``
    dec_key: bytes | None = None  # the key of an encrypted .mindir/.ckpt
    dec_mode: str | None = None
    external_data_dir: str | os.PathLike | None = None  # external data of a model given as bytes/proto


@dataclass(frozen=True)
class GraphOptions:
    """What the converter does to the graph."""

    optimize: bool = True  # run the default passes
    input_shapes: dict[str, list[int | str]] | None = None
    dynamic_batch: bool = False
    fp16: bool = False  # store float weights as float16
    fp16_io: bool = False  # float16 inputs and outputs too (implies fp16)
    allow_custom: bool = False  # keep nodes the runtime cannot run as custom ops

    def recorded(self) -> dict[str, Any]:
        """The options as stored in the model's ``converter_options`` metadata and the report."""
        return {
            "optimize": self.optimize,
            "input_shapes": {name: list(shape) for name, shape in (self.input_shapes or {}).items()},
            "dynamic_batch": self.dynamic_batch,
            "fp16": self.fp16,
            "fp16_io": self.fp16_io,
            "allow_custom": self.allow_custom,
        }


@dataclass(frozen=True)
class VerifyOptions:
    """The comparison of the output with the original (:mod:`converter.verify`)."""

    verify: bool | None = None  # None: when onnxruntime is installed and the model is not int8
    rtol: float | None = None  # None: 1e-4, or 1e-2 with float16 weights
    atol: float | None = None  # None: 1e-6, or 1e-3 with float16 weights
    verify_data: Any = None  # a .npz file, a folder in the calibration format, or input dicts
    # shared libraries of custom ops (onnxruntime-extensions' get_library_path()) that ONNX Runtime
    # loads to run the original and the converted model
    custom_op_libraries: Sequence[str | os.PathLike] | str | os.PathLike = ()

    def libraries(self) -> tuple[str, ...]:
        """``custom_op_libraries`` as absolute paths (one path alone is a list of one), each a file."""
        libraries = self.custom_op_libraries
        libraries = (libraries,) if isinstance(libraries, (str, os.PathLike)) else tuple(libraries)
        missing = [str(path) for path in libraries if not os.path.isfile(path)]
        if missing:
            raise InvalidOptionError(f"custom op library {missing[0]!r} is not a file: give the path of the shared "
                                     "library, e.g. onnxruntime_extensions.get_library_path()")
        return tuple(os.path.abspath(path) for path in libraries)

    def tolerance(self, fp16: bool) -> Tolerance:
        rtol = self.rtol if self.rtol is not None else (1e-2 if fp16 else 1e-4)
        atol = self.atol if self.atol is not None else (1e-3 if fp16 else 1e-6)
        if not (rtol >= 0 and atol >= 0):  # also refuses NaN
            raise InvalidOptionError(f"verification tolerances are >= 0; got rtol {rtol}, atol {atol}")
        return Tolerance(rtol, atol)


@dataclass(frozen=True)
class QuantizeOptions:
    """Quantization (docs/quantization.md)."""

    quant: str | None = None  # "int8", "int8-dynamic", "int8-weight" or "fp16"
    calibration_data: Any = None  # a folder of .npy/.npz files or images, or an iterable of arrays
    calibration_method: str = "minmax"
    calibration_size: int = 256
    per_channel: bool = True
    eval_data: Any = None  # adds the accuracy report
    max_accuracy_drop: float | None = None  # percentage points; the most sensitive layers stay float
    preprocessing: str | dict[str, Any] | None = None  # the image spec (JSON, dict or path)
    quant_options: dict[str, Any] | None = None  # further QuantConfig fields
    progress: Any = False

    def config(self) -> QuantConfig | None:
        """The quantization's configuration, or None without ``quant``."""
        self._check_int8_only_options()
        if self.quant is None:
            return None
        return QuantConfig(
            mode=self.quant,
            calibration_method=self.calibration_method,
            calibration_size=self.calibration_size,
            per_channel=self.per_channel,
            max_accuracy_drop=self.max_accuracy_drop,
            **(self.quant_options or {}),
        )

    def _check_int8_only_options(self) -> None:
        """Calibration data, evaluation data and the accuracy budget given where they would be
        ignored are errors, as every option that does not apply is."""
        if self.calibration_data is not None and self.quant != "int8":
            raise InvalidOptionError(
                f"calibration data (--calib, calibration_data) applies to quant 'int8' (--quant int8) only, "
                f"not to {_mode(self.quant)}: add --quant int8, or drop --calib"
            )
        for value, option in ((self.eval_data, "eval_data (--eval)"),
                              (self.max_accuracy_drop, "max_accuracy_drop (--max-accuracy-drop)")):
            if value is not None and not self.is_int8:
                raise InvalidOptionError(
                    f"{option} needs quant int8, int8-dynamic or int8-weight (--quant ...): it compares the float "
                    f"and the int8 model; not {_mode(self.quant)}"
                )

    @property
    def is_int8(self) -> bool:
        return self.quant is not None and self.quant != "fp16"


def _mode(quant: str | None) -> str:
    return "a float conversion (no --quant)" if quant is None else f"quant {quant!r}"


@dataclass(frozen=True)
class ConvertOptions:
    """Every option of ``converter.convert``, grouped."""

    source: SourceOptions = field(default_factory=SourceOptions)
    graph: GraphOptions = field(default_factory=GraphOptions)
    verification: VerifyOptions = field(default_factory=VerifyOptions)
    quantization: QuantizeOptions = field(default_factory=QuantizeOptions)
    report_path: str | os.PathLike | None = None  # where the JSON report is written

    def replace(self, **keywords: Any) -> ConvertOptions:
        """These options with ``convert``'s keywords (``fp16=True``, ``rtol=1e-3``, ...) replacing
        the fields of the same name; an unknown keyword is a TypeError, as for any function."""
        remaining = dict(keywords)
        changes: dict[str, Any] = {}
        for group in dataclasses.fields(self):
            value = getattr(self, group.name)
            if not dataclasses.is_dataclass(value):
                if group.name in remaining:
                    changes[group.name] = remaining.pop(group.name)
                continue
            names = {f.name for f in dataclasses.fields(value)} & remaining.keys()
            if names:
                changes[group.name] = dataclasses.replace(value, **{name: remaining.pop(name) for name in names})
        if remaining:
            raise TypeError(f"convert() got unexpected keyword argument(s): {', '.join(sorted(remaining))}")
        return dataclasses.replace(self, **changes)

    def settled(self) -> ConvertOptions:
        """Defaults that depend on other options made explicit: ``fp16_io`` and ``quant="fp16"``
        store float16 weights."""
        graph, quantization = self.graph, self.quantization
        fp16 = graph.fp16 or graph.fp16_io or quantization.quant == "fp16"
        return dataclasses.replace(self, graph=dataclasses.replace(graph, fp16=fp16))
