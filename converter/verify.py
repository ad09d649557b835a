"""Check a conversion numerically: the original model in ONNX Runtime vs the converted one.

The check helps; it never blocks a conversion it could not carry out:

1. **Inputs** the original accepts: the caller's samples (``verify_data``), else inputs planned
   from the graph (:mod:`converter.verification_inputs`), in rounds of growing size until ONNX
   Runtime runs the original on them.
2. **The reference's own spread** (:mod:`converter.verify_spread`): the original also runs with
   ONNX Runtime's graph optimizations off, and, if it quantizes activations, on inputs nudged by
   1e-6; how far its outputs move is noise no conversion can be asked to beat, and widens the
   tolerance for that output (:class:`lite.compare.Tolerance`).
3. **The comparison** (:mod:`lite.compare`): IEEE-aware, relative to each output's peak with an
   absolute floor.

When ONNX Runtime cannot load the original, cannot run it on any planned inputs, or an input has
a type no random data stands for, the verification is *skipped* with the reason, and the
conversion stands. A converted model that fails where the original ran, or differs beyond the
tolerance, *fails* it: then :mod:`converter.divergence` names the first node whose output
differs.

onnxruntime is imported only here, and only when verification runs.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from converter.errors import InvalidOptionError, VerificationError
from converter.onnx_export import make_ort_compatible
from converter.passes.output_size import predicted_elements
from converter.verification_inputs import UnsynthesizableInputError, plans
from converter.verification_inputs import feeds as planned_feeds
from converter.verify_spread import (
    LEVELS,
    Movement,
    add_nudges,
    combined,
    quantizes_activations,
    selects_discretely,
)
from lite.compare import OutputError, Tolerance, compare_outputs
from lite.engines.ort import thread_pools

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class Verification:
    engine: str  # what ran the converted model
    tolerance: Tolerance
    outputs: list[OutputError] = field(default_factory=list)
    status: str = PASSED
    reason: str | None = None  # why it was skipped or failed
    inputs: str = ""  # which inputs it ran on
    divergence: dict[str, Any] | None = None  # the first node whose output differs (failures)
    feeds: dict[str, np.ndarray] | None = field(default=None, repr=False)  # the inputs it ran on
    notes: list[str] = field(default_factory=list)  # what a passed check did not show

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def skipped(self) -> bool:
        return self.status == SKIPPED

    @property
    def rtol(self) -> float:
        return self.tolerance.rtol

    def worst(self) -> OutputError | None:
        failing = [o for o in self.outputs if not o.within(self.tolerance)]
        if failing:
            return failing[0]
        # integer outputs' max_rel is a count of differing elements, not comparable with the floats'
        return max(self.outputs, key=lambda o: (not o.mismatched_values, o.max_rel), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "status": self.status,
            "passed": self.passed,
            "reason": self.reason,
            "inputs": self.inputs,
            "tolerance": self.tolerance.to_dict(),
            "rtol": self.tolerance.rtol,
            "outputs": [o.to_dict() for o in self.outputs],
            "divergence": self.divergence,
            "notes": list(self.notes),
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
                    what: str = "the original model", optimize: bool = True) -> dict[str, np.ndarray]:
    """Run ``proto`` in ONNX Runtime (CPU); raise :class:`VerificationError` naming ``what`` if it
    cannot be loaded or run (e.g. a node asks for more memory than there is)."""
    return _Reference(proto, threads, what, optimize).run(feeds)


class _Reference:
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
            _unique_node_names(compatible.graph)
            self.session = ort.InferenceSession(compatible.SerializeToString(), options,
                                                providers=["CPUExecutionProvider"])
        # onnxruntime's errors (Fail, InvalidArgument, InvalidGraph, ...) derive from Exception only.
        except Exception as err:  # includes MemoryError
            raise VerificationError(f"ONNX Runtime cannot load {what} ({_first_line(err)})") from err
        self.names = [o.name for o in self.session.get_outputs()]
        self.wanted = {i.name for i in self.session.get_inputs()}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.session.run(self.names, {k: v for k, v in feeds.items() if k in self.wanted})
        except Exception as err:  # noqa: BLE001 - see __init__
            raise VerificationError(f"ONNX Runtime cannot run {self.what} on these inputs ({_first_line(err)})") from err
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


def _unique_node_names(graph: onnx.GraphProto, taken: set[str] | None = None) -> None:
    """Rename repeated node names (ONNX allows them, ONNX Runtime refuses to load them; names
    change nothing a node computes), in subgraphs too."""
    taken = set() if taken is None else taken
    for node in graph.node:
        if node.name:
            name, suffix = node.name, 1
            while name in taken:
                name, suffix = f"{node.name}__{suffix}", suffix + 1
            node.name = name
            taken.add(name)
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs):
                _unique_node_names(subgraph, taken)


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class InputsRejectedError(VerificationError):
    """The converted model's kernel refused the inputs themselves (a node reading a model input
    directly): on synthesized inputs that says nothing about the conversion."""


RunConverted = Callable[[dict[str, np.ndarray]], Mapping[str, Any]]


def verify_conversion(original: onnx.ModelProto, run_converted: RunConverted, engine: str, tolerance: Tolerance, *,
                      input_shapes: dict[str, list[int | str]] | None = None,
                      verify_data: list[dict[str, np.ndarray]] | None = None,
                      input_dtypes: dict[str, np.dtype] | None = None,
                      custom_op_libraries: Sequence[str] = ()) -> Verification:
    """Compare ``run_converted`` with ONNX Runtime on ``original`` (see the module docstring).

    ``input_dtypes``: the converted model's input types where they differ from the original's
    (``fp16_io``); the reference gets the same values in its own types. ``custom_op_libraries``
    are registered with ONNX Runtime's sessions of the original.
    """
    verification = Verification(engine, tolerance)
    try:
        reference = _Reference(original, libraries=custom_op_libraries)
    except VerificationError as err:
        verification.status, verification.reason = SKIPPED, str(err)
        _run_converted_alone(verification, original, run_converted, input_shapes, verify_data)
        return verification
    try:
        feeds, expected, verification.inputs = _accepted_inputs(reference, original, input_shapes, verify_data)
    except (VerificationError, UnsynthesizableInputError) as err:
        verification.status, verification.reason = SKIPPED, str(err)
        return verification
    verification.feeds = feeds
    constant = [name for name, value in expected.items() if _constant(value)]
    if constant:
        verification.notes.append(
            f"the original's output {', '.join(map(repr, constant))} is constant on {verification.inputs}, so the "
            "comparison shows little there; give real inputs with --verify-data FILE.npz|DIR"
        )
    verification.tolerance = tolerance = _with_spread(tolerance, original, reference, feeds, expected,
                                                      custom_op_libraries)
    converted_feeds = {name: value.astype(input_dtypes[name]) if input_dtypes and name in input_dtypes else value
                       for name, value in feeds.items()}
    try:
        actual = run_converted(converted_feeds)
    except InputsRejectedError as err:
        # Synthesized inputs ONNX Runtime and even onnx's reference implementation run may still be
        # outside an op's domain (MelWeightMatrix's lower edge above its upper one, Pad's axes named
        # twice), where lite's kernels refuse what those compute silently: not lite's failure.
        if verify_data is None:
            verification.status = SKIPPED
            verification.reason = (f"the synthesized inputs are outside what the model accepts ({err}); give real "
                                   "inputs with --verify-data FILE.npz|DIR")
        else:
            verification.status, verification.reason = FAILED, str(err)
        return verification
    except VerificationError as err:
        verification.status, verification.reason = FAILED, str(err)
        actual = None
    else:
        verification.outputs = compare_outputs(expected, actual, tolerance)
        failing = [o for o in verification.outputs if not o.within(tolerance)]
        if not failing:
            return verification
        verification.status = FAILED
        verification.reason = "; ".join(o.describe(tolerance) for o in failing[:3])
    _second_opinion(verification, original, feeds, actual, synthesized=verify_data is None)
    return verification


def _run_converted_alone(verification: Verification, original: onnx.ModelProto, run_converted: RunConverted,
                         input_shapes, verify_data) -> None:
    """With no reference to compare with, still run the converted model once: a model that runs
    on no input (an exporter's Unsqueeze past the rank) converted with exit 0 and failed at its
    first call. Its failure is a note (the inputs may be outside what it accepts), not the verdict."""
    try:
        if verify_data:
            feeds, what = verify_data[0], "the samples given (verify data)"
        else:
            plan = next(iter(plans(original, input_shapes)))
            feeds, what = planned_feeds(plan), f"synthesized: {plan.description}"
    except (StopIteration, UnsynthesizableInputError):
        return
    try:
        run_converted(feeds)
    except Exception as err:  # noqa: BLE001 - whatever stops it, the user needs to know
        verification.notes.append(
            f"the converted model fails on {what} too ({_first_line(err.__cause__ or err)}); with no reference to "
            "compare, check "
            "that it runs on real inputs (lite run MODEL --input ...)"
        )


def _second_opinion(verification: Verification, original: onnx.ModelProto, feeds, actual, *,
                    synthesized: bool) -> None:
    """ONNX Runtime is the reference, but not the specification: where the converted model
    disagrees with it, ask onnx's reference implementation. If it rejects synthesized inputs,
    they were outside what the model accepts (the check could not run: skipped); if the converted
    model agrees with it, ONNX Runtime is the one that departs (passed, with a note): its
    approximate Sigmoid merges near logits, and a TopK after it picks other indices."""
    if not _small_enough_for_the_reference_implementation(original):
        return
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(original)
        names = [output.name for output in original.graph.output]
        wanted = {value.name for value in original.graph.input}
        # Random inputs reach log(0) and casts of NaN: numpy's warnings about them are not the user's.
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = evaluator.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except (NotImplementedError, ImportError, TypeError, AttributeError) as err:
        # The reference implementation lacks an op (or fails in itself): no second opinion, the failure stands.
        verification.notes.append(f"onnx's reference implementation cannot run the original ({_first_line(err)})")
        return
    except Exception as err:  # noqa: BLE001 - it refuses inputs outside an op's domain in any way
        if not synthesized:  # the caller's own samples: the failure stands
            verification.notes.append(f"onnx's reference implementation cannot run the original ({_first_line(err)})")
            return
        converted = "rejects them too" if actual is None else "differs from ONNX Runtime on them"
        verification.status = SKIPPED
        verification.reason = (
            f"the synthesized inputs are outside what the model accepts: ONNX Runtime ran it, but the ONNX reference "
            f"implementation rejects them ({_first_line(err)}), and the converted model {converted} "
            f"({verification.reason}). Give real inputs with --verify-data FILE.npz|DIR"
        )
        return
    if actual is None:
        return
    specified = dict(zip(names, results))
    agreeing = compare_outputs(specified, actual, verification.tolerance)
    if all(o.within(verification.tolerance) for o in agreeing):
        departed = ", ".join(repr(o.name) for o in verification.outputs if not o.within(verification.tolerance))
        verification.status, verification.reason = PASSED, None
        verification.notes.append(f"ONNX Runtime departs from the ONNX reference implementation on {departed}; "
                                  "the converted model agrees with the reference implementation")


def _constant(value: Any) -> bool:
    array = np.asarray(value)
    return array.dtype.kind == "f" and array.size > 1 and bool(np.all(array == array.reshape(-1)[0]))


_REFERENCE_MAX_NODES = 2000
_REFERENCE_MAX_WEIGHTS = 8 << 20  # elements: the reference implementation is plain numpy, and slow


def _small_enough_for_the_reference_implementation(proto: onnx.ModelProto) -> bool:
    weights = sum(int(np.prod(init.dims, dtype=np.int64)) for init in proto.graph.initializer)
    return len(proto.graph.node) <= _REFERENCE_MAX_NODES and weights <= _REFERENCE_MAX_WEIGHTS


def _accepted_inputs(reference: _Reference, original: onnx.ModelProto, input_shapes, verify_data):
    """Inputs the original runs on, its outputs, and a description; VerificationError when none."""
    if verify_data:
        feeds = verify_data[0]
        try:
            return feeds, reference.run(feeds), "the samples given (verify data)"
        except VerificationError as err:  # the caller's own inputs: their mistake to fix, not a skip
            raise InvalidOptionError(f"verify data: {err}") from err
    errors = []
    for plan in plans(original, input_shapes):
        feeds = planned_feeds(plan)
        try:
            return feeds, reference.run(feeds), f"synthesized: {plan.description}"
        except VerificationError as err:
            errors.append(f"{plan.description}: {err}")
    shown = "; ".join(errors[-2:]) if errors else "the model has no inputs to synthesize"
    raise VerificationError(
        f"ONNX Runtime cannot run the original model on any synthesized inputs ({shown}). Give real inputs with "
        "--verify-data FILE.npz|DIR (verify_data=), or sizes with --input-shape NAME:D0,D1,..."
    )


def _with_spread(tolerance: Tolerance, original: onnx.ModelProto, reference: _Reference, feeds,
                 expected, libraries: Sequence[str] = ()) -> Tolerance:
    """``tolerance`` widened by how far ONNX Runtime moves between its optimization levels and,
    for a model that quantizes activations or picks by ArgMax, ArgMin or TopK, under a tiny nudge
    of the inputs; outputs a run reorders are compared as sets of rows
    (:mod:`converter.verify_spread`). A spread the caller gave stands as given."""
    if tolerance.spread is not None:
        return tolerance
    movement = Movement(expected, tolerance)
    try:
        movement.add(LEVELS, _Reference(original, optimize=False, libraries=libraries).run(feeds))
    except VerificationError:
        pass  # no second level to compare with: the nudge alone, if any
    if quantizes_activations(original) or selects_discretely(original):
        try:
            add_nudges(movement, reference.run, feeds)
        except VerificationError:
            pass  # ONNX Runtime refuses nudged inputs (a value checked for equality): no nudge spread
    measured = movement.measured()
    if not measured:
        return tolerance
    spread, source = combined(measured)
    return dataclasses.replace(tolerance, spread=spread, spread_source=source, unordered=movement.reordered())


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy
