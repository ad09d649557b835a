"""Check a conversion numerically: the original model in ONNX Runtime vs the converted one.

Both run on the same random inputs (fixed seed; standard normal floats, small non-negative
integers, random booleans; symbolic dims set to 1, or 2 for the ``batch`` dim that
``--dynamic-batch`` introduces). The converted model runs in ``lite.Model`` (numpy engine) when the runtime is
available and the output is .lite, otherwise as its ONNX export in ONNX Runtime. For every output
the report gives the largest absolute error, the largest error relative to the output's largest
magnitude, and the cosine similarity; verification fails when the relative error exceeds
``rtol``.

onnxruntime is imported only here, and only when verification runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from converter.errors import VerificationError
from converter.onnx_export import make_ort_compatible


@dataclass
class OutputError:
    name: str
    max_abs: float
    max_rel: float
    cosine: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_abs": self.max_abs, "max_rel": self.max_rel, "cosine": self.cosine}


@dataclass
class Verification:
    engine: str  # what ran the converted model
    rtol: float
    outputs: list[OutputError] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o.max_rel <= self.rtol for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "rtol": self.rtol,
            "passed": self.passed,
            "outputs": [o.to_dict() for o in self.outputs],
        }


def onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def random_inputs(proto: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in proto.graph.initializer}
    feeds = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            else:
                shape.append(2 if dim.dim_param == "batch" else 1)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[value.name] = rng.integers(0, 4, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise VerificationError(f"input {value.name!r}: cannot make random data of type {dtype}; pass verify=False")
    return feeds


def run_onnxruntime(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 2,
                    what: str = "the original model") -> dict[str, np.ndarray]:
    """Run ``proto`` in ONNX Runtime (CPU); raise :class:`VerificationError` naming ``what`` if it
    cannot be loaded or run (e.g. a node asks for more memory than there is)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 4  # fatal only: a failure is reported once, as VerificationError
    compatible = make_ort_compatible(_copy(proto))
    try:
        session = ort.InferenceSession(compatible.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        results = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    # onnxruntime's errors (Fail, InvalidArgument, InvalidGraph, ...) derive from Exception only.
    except Exception as err:  # includes MemoryError
        raise VerificationError(
            f"ONNX Runtime cannot run {what} on the random verification inputs ({_first_line(err)}); "
            "convert with verify=False (--no-verify) to skip the comparison"
        ) from err
    return dict(zip(names, results))


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def compare(reference: dict[str, np.ndarray], actual: dict[str, np.ndarray], engine: str, rtol: float) -> Verification:
    verification = Verification(engine, rtol)
    for name, expected in reference.items():
        if name not in actual:
            raise VerificationError(f"output {name!r} of the original model is missing from the converted model")
        got = np.asarray(actual[name])
        expected = np.asarray(expected)
        if got.shape != expected.shape:
            raise VerificationError(f"output {name!r}: shape {got.shape} after conversion, {expected.shape} before")
        verification.outputs.append(_errors(name, expected, got))
    return verification


def _errors(name: str, expected: np.ndarray, got: np.ndarray) -> OutputError:
    if expected.dtype.kind not in "fc" and got.dtype.kind not in "fc":
        mismatch = float(np.count_nonzero(expected != got))
        return OutputError(name, mismatch, mismatch, 1.0 if mismatch == 0 else 0.0)
    a = expected.astype(np.float64).reshape(-1)
    b = got.astype(np.float64).reshape(-1)
    if a.size == 0:
        return OutputError(name, 0.0, 0.0, 1.0)
    max_abs = float(np.max(np.abs(a - b)))
    magnitude = float(np.max(np.abs(a)))
    max_rel = max_abs / magnitude if magnitude > 0 else max_abs
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(np.dot(a, b) / norms) if norms > 0 else (1.0 if max_abs == 0 else 0.0)
    return OutputError(name, max_abs, max_rel, cosine)


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy
