"""The original model in an ONNX Runtime session: the reference a conversion is checked against.

Verification (:mod:`converter.verify`), its spread (:mod:`converter.verify_spread`) and the
search for the first diverging node (:mod:`converter.divergence`) all run the original the same
way, and what it takes to get there is its own concern: ONNX Runtime refuses models that ONNX
allows (repeated node names, ops it lacks in the declared opset: :func:`make_ort_compatible`),
registers custom-op libraries, and would fill the memory for minutes on a tensor built from
constants alone (Range(0, 1e10)), which is refused here before the session is made. Its errors
derive from Exception only; here they are :class:`VerificationError` naming the model.

onnxruntime is imported only here, and only when a session is made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from converter.errors import VerificationError
from converter.onnx_export import make_ort_compatible
from converter.passes.output_size import predicted_elements
from lite.engines.ort import thread_pools
from lite.format.onnx.lower import unique_node_names


def onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True

def run_onnxruntime(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 2,
                    what: str = "the original model", optimize: bool = True) -> dict[str, np.ndarray]:
    """Run ``proto`` in ONNX Runtime (CPU); raise :class:`VerificationError` naming ``what`` if it
    cannot be loaded or run (e.g. a node asks for more memory than there is)."""
    return ReferenceSession(proto, threads, what, optimize).run(feeds)


class ReferenceSession:
    """An ONNX Runtime session of a model; its errors are :class:`VerificationError` naming ``what``.
    ``libraries``: shared libraries of custom ops (onnxruntime-extensions) registered with it."""

    def __init__(self, proto: onnx.ModelProto, threads: int = 2, what: str = "the original model",
                 optimize: bool = True, libraries: Sequence[str] = ()) -> None:
        import onnxruntime as ort

        self.what = what
        options = ort.SessionOptions()
        if thread_pools.sharing():  # ONNX Runtime then refuses sessions with a pool of their own
            options.use_per_session_threads = False
        else:
            options.intra_op_num_threads = threads
        for library in libraries:
            options.register_custom_ops_library(library)
        options.log_severity_level = 4  # fatal only: a failure is reported once, as VerificationError
        if not optimize:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        oversized = _oversized_constant_tensor(proto)
        if oversized:
            raise VerificationError(f"{what} {oversized}: too large to run for the check")
        try:
            compatible = make_ort_compatible(_copy(proto))
            unique_node_names(compatible.graph)
            self.session = ort.InferenceSession(compatible.SerializeToString(), options,
                                                providers=["CPUExecutionProvider"])
        # onnxruntime's errors (Fail, InvalidArgument, InvalidGraph, ...) derive from Exception only.
        except Exception as err:  # includes MemoryError
            raise VerificationError(f"ONNX Runtime cannot load {what} ({first_line(err)})") from err
        self.names = [o.name for o in self.session.get_outputs()]
        self.wanted = {i.name for i in self.session.get_inputs()}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.session.run(self.names, {k: v for k, v in feeds.items() if k in self.wanted})
        except Exception as err:  # noqa: BLE001 - see __init__
            raise VerificationError(f"ONNX Runtime cannot run {self.what} on these inputs ({first_line(err)})") from err
        return dict(zip(self.names, results))


# A tensor the reference would build from the model's constants alone (Range(0, 1e10) wants 80 GB).
# ONNX Runtime tries: on a machine with less memory it fails at once, on a larger one it fills the
# memory for minutes. Over this size the check does not run, on every machine alike.
_REFERENCE_MAX_ELEMENTS = 1 << 30
_SIZED_BY_VALUES = {"Range", "ConstantOfShape", "Expand", "Tile", "Pad", "OneHot", "Resize", "Upsample"}


def _oversized_constant_tensor(proto: onnx.ModelProto) -> str | None:
    """What in the main graph would make a tensor over :data:`_REFERENCE_MAX_ELEMENTS` elements
    from constants alone (sizes computed, nothing evaluated), or None."""
    graph = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    constants: dict[str, onnx.TensorProto] = {init.name: init for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR), None)
            if value is not None:
                constants[node.output[0]] = value
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type not in _SIZED_BY_VALUES:
            continue
        names = [name for name in node.input if name]
        if not names or any(name not in constants for name in names):
            continue
        try:
            feeds = {name: _array_for_size(constants[name]) for name in names}
            sizes, _ = predicted_elements(node, feeds, opset)
        except Exception:  # noqa: BLE001 - a malformed constant: ONNX Runtime will say what is wrong
            continue
        if sizes and sum(sizes) > _REFERENCE_MAX_ELEMENTS:
            label = f"{node.op_type} node {node.name!r}" if node.name else f"a {node.op_type} node"
            return f"builds a tensor of {sum(sizes):,} elements from its constants ({label})"
    return None


def _array_for_size(tensor: onnx.TensorProto) -> np.ndarray:
    """The constant's values if small (shapes, pads, scales), else an array of its shape and type
    that holds no memory: sizes need only those."""
    dims = [int(d) for d in tensor.dims]
    if math.prod(dims) <= 1 << 16 and tensor.data_location != onnx.TensorProto.EXTERNAL:
        return onnx.numpy_helper.to_array(tensor)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return np.broadcast_to(np.zeros((), dtype), dims)


def first_line(err: BaseException) -> str:
    """The first line of an error's message, at most 300 characters: what a report can show."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy
