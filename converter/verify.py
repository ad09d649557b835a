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

The original runs in ONNX Runtime through :mod:`converter.reference_session`, which alone imports
onnxruntime, and only when verification runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from converter.errors import InvalidOptionError, VerificationError
from converter.reference_session import ReferenceSession, first_line
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
        reference = ReferenceSession(original, libraries=custom_op_libraries)
    except VerificationError as err:
        verification.status, verification.reason = SKIPPED, str(err)
        _run_converted_alone(verification, original, run_converted, input_shapes, verify_data)
        return verification
    try:
        feeds, expected, verification.inputs = _accepted_inputs(reference, original, input_shapes, verify_data)
    except (VerificationError, UnsynthesizableInputError) as err:
        verification.status, verification.reason = SKIPPED, str(err)
        return verification
    if input_dtypes:
        try:
            feeds, expected = _rounded_as_given(reference, feeds, input_dtypes)
        except VerificationError as err:
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


def _rounded_as_given(reference: ReferenceSession, feeds: dict[str, np.ndarray],
                      input_dtypes: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The feeds with each input the converted model takes in a narrower type (``fp16_io``)
    rounded to it and back, and the reference's outputs on them: the converted model can only
    be given the rounded values, so the reference gets the same ones. Compared on the unrounded
    inputs, a model sensitive to its inputs (sin(4096·x); trueocr's reading-order model, 3.9-6.8 %)
    failed for the rounding of its inputs, not for its conversion."""
    rounded = {name: value.astype(input_dtypes[name]).astype(value.dtype) if name in input_dtypes else value
               for name, value in feeds.items()}
    return rounded, reference.run(rounded)


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
            f"the converted model fails on {what} too ({first_line(err.__cause__ or err)}); with no reference to "
            "compare, check "
            "that it runs on real inputs (lite run MODEL --input ...)"
        )


def _runs_on_zeros(evaluator: Any, feeds: dict[str, Any], wanted: set[str]) -> bool:
    """Whether onnx's reference implementation runs the model on zeros of the feeds' shapes and
    types: inputs it cannot take in any domain (every index valid, no value out of range), so a
    failure on the synthesized values is theirs, not the implementation's."""
    if evaluator is None:  # it could not even take the model
        return False
    zeros = {k: np.zeros_like(v) if isinstance(v, np.ndarray) and v.dtype.kind != "O" else v
             for k, v in feeds.items() if k in wanted}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            evaluator.run(None, zeros)
    except Exception:  # noqa: BLE001 - any failure here is the implementation's own
        return False
    return True


def _second_opinion(verification: Verification, original: onnx.ModelProto, feeds, actual, *,
                    synthesized: bool) -> None:
    """ONNX Runtime is the reference, but not the specification: where the converted model
    disagrees with it, ask onnx's reference implementation. If it rejects synthesized inputs,
    they were outside what the model accepts (the check could not run: skipped); if the converted
    model agrees with it, ONNX Runtime is the one that departs (passed, with a note): its
    approximate Sigmoid merges near logits, and a TopK after it picks other indices."""
    if not _small_enough_for_the_reference_implementation(original):
        return
    evaluator = None
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
        verification.notes.append(f"onnx's reference implementation cannot run the original ({first_line(err)})")
        return
    except Exception as err:  # noqa: BLE001 - it refuses inputs outside an op's domain in any way
        if not synthesized or not _runs_on_zeros(evaluator, feeds, wanted):
            # The caller's own samples, or a failure of the reference implementation itself (it
            # fails on zeros of the same shapes too: nodes out of topological order, numpy's
            # 64-array limit in its GatherElements): the failure stands.
            verification.notes.append(f"onnx's reference implementation cannot run the original ({first_line(err)})")
            return
        converted = "rejects them too" if actual is None else "differs from ONNX Runtime on them"
        verification.status = SKIPPED
        verification.reason = (
            f"the synthesized inputs are outside what the model accepts: ONNX Runtime ran it, but the ONNX reference "
            f"implementation rejects them ({first_line(err)}), and the converted model {converted} "
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


def _accepted_inputs(reference: ReferenceSession, original: onnx.ModelProto, input_shapes, verify_data):
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


def _with_spread(tolerance: Tolerance, original: onnx.ModelProto, reference: ReferenceSession, feeds,
                 expected, libraries: Sequence[str] = ()) -> Tolerance:
    """``tolerance`` widened by how far ONNX Runtime moves between its optimization levels and,
    for a model that quantizes activations or picks by ArgMax, ArgMin or TopK, under a tiny nudge
    of the inputs; outputs a run reorders are compared as sets of rows
    (:mod:`converter.verify_spread`). A spread the caller gave stands as given."""
    if tolerance.spread is not None:
        return tolerance
    movement = Movement(expected, tolerance)
    try:
        movement.add(LEVELS, ReferenceSession(original, optimize=False, libraries=libraries).run(feeds))
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
