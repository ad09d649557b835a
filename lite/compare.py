"""Comparing a model's outputs with a reference: one definition for verification, tuning and bench.

IEEE values are compared as values: a NaN where the reference has a NaN agrees, as do equal
infinities; a NaN or an infinity on one side only never does. Finite elements are judged
against the output's largest finite magnitude (``rtol``) with an absolute floor (``atol``), so
that an output of magnitude 1e-7 is not failed for a 3e-8 difference that float32 arithmetic
makes anyway, and against ``spread``: how far the reference moves by itself (for example between
ONNX Runtime's optimization levels, or under a tiny nudge of the inputs), which no conversion can be asked to beat. Integer and
boolean outputs must be equal, but for as many elements as the reference's own runs disagree on
(times ``spread_factor``): a detector's labels after near-tied scores flip with the order of a sum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

_ROUNDING_STEPS = 4  # a few units in the last place of the output's type: rounding, not error


@dataclass(frozen=True)
class Tolerance:
    """``rtol``: of the output's largest finite magnitude; ``atol``: absolute floor; ``spread``
    (per output name): how much the reference itself varies, allowed times ``spread_factor``;
    ``spread_source`` (per output name): how that was measured, in words that complete "the
    reference moves by X ..." (e.g. "with and without ONNX Runtime's optimizations")."""

    rtol: float = 1e-4
    atol: float = 1e-6
    spread: Mapping[str, float] | None = None
    spread_factor: float = 2.0
    spread_source: Mapping[str, str] | None = None
    # Outputs compared as sets of rows (:func:`row_set_error`): the reference's own runs hold the
    # same rows in another order (near-tied scores sorted by a TopK or NMS).
    unordered: frozenset[str] = frozenset()

    def allowed(self, name: str, magnitude: float, dtype: np.dtype | None = None) -> float:
        """The largest absolute difference accepted on output ``name`` of that magnitude; an output
        of a narrow float type (float16: 3 significant digits) is never held to less than a few
        of its own rounding steps."""
        spread = (self.spread or {}).get(name, 0.0) * self.spread_factor
        rtol = self.rtol
        if dtype is not None and np.dtype(dtype).kind == "f":
            rtol = max(rtol, _ROUNDING_STEPS * float(np.finfo(dtype).eps))
        return max(self.atol, rtol * magnitude, spread)

    def allowed_mismatches(self, name: str) -> int:
        """Elements of integer/boolean output ``name`` that may differ: ``spread_factor`` times
        those the reference's own runs disagree on (its spread; the count, as
        :func:`output_error` measures such outputs)."""
        return int((self.spread or {}).get(name, 0.0) * self.spread_factor)

    def to_dict(self) -> dict[str, Any]:
        return {"rtol": self.rtol, "atol": self.atol, "spread_factor": self.spread_factor,
                "spread": dict(self.spread or {}), "spread_source": dict(self.spread_source or {}),
                "unordered": sorted(self.unordered)}


@dataclass
class OutputError:
    """How one output differs from its reference."""

    name: str
    max_abs: float  # over elements finite on both sides
    max_rel: float  # max_abs over the reference's largest finite magnitude
    cosine: float
    magnitude: float = 0.0
    mismatched_special: int = 0  # NaN or infinity on one side but not the other (or unequal infinities)
    mismatched_values: int = 0  # integer/boolean outputs: elements that differ; unordered ones: rows unpaired
    problem: str | None = None  # shapes or presence differ: no element-wise comparison was possible
    dtype: np.dtype | None = None  # the reference's element type
    unordered: bool = False  # compared as a set of rows (row_set_error)

    def within(self, tolerance: Tolerance) -> bool:
        if self.problem is not None or self.mismatched_special:
            return False
        if self.mismatched_values or self.unordered:  # an unordered output's paired rows are within by construction
            return self.mismatched_values <= tolerance.allowed_mismatches(self.name)
        return self.max_abs <= tolerance.allowed(self.name, self.magnitude, self.dtype)

    def describe(self, tolerance: Tolerance) -> str:
        """One line: what differs, and by how much against what was allowed."""
        if self.problem is not None:
            return f"output {self.name!r}: {self.problem}"
        if self.mismatched_special:
            return f"output {self.name!r}: {self.mismatched_special} elements are NaN or infinite on one side only"
        if self.mismatched_values:
            what = "rows have no counterpart in any order" if self.unordered else "integer/boolean elements differ"
            text = f"output {self.name!r}: {self.mismatched_values} {what}"
            moved = (tolerance.spread or {}).get(self.name, 0.0)
            if moved:
                text += (f" (the reference's own runs differ in {moved:g}; {tolerance.allowed_mismatches(self.name)} "
                         "allowed)")
            return text
        return (f"output {self.name!r}: max abs error {self.max_abs:.3g} (relative {self.max_rel:.3g} of its peak "
                f"{self.magnitude:.3g}) > allowed {tolerance.allowed(self.name, self.magnitude, self.dtype):.3g}; "
                f"cosine {self.cosine:.6f}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_abs": self.max_abs, "max_rel": self.max_rel, "cosine": self.cosine,
                "magnitude": self.magnitude, "mismatched_special": self.mismatched_special,
                "mismatched_values": self.mismatched_values, "problem": self.problem, "unordered": self.unordered,
                "dtype": None if self.dtype is None else np.dtype(self.dtype).name}


def _text(value: Any) -> Any:
    """A string element as text: the numpy engine carries STRING tensors as bytes (any bytes
    pass through), ONNX Runtime returns str; b'cat' and 'cat' are one value."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def output_error(name: str, expected: Any, got: Any) -> OutputError:
    """How ``got`` differs from ``expected`` (arrays of one output)."""
    a, b = np.asarray(expected), np.asarray(got)
    if a.shape != b.shape:
        return OutputError(name, np.inf, np.inf, 0.0, problem=f"shape {list(b.shape)}, the reference's {list(a.shape)}")
    if a.dtype.kind not in "fc" and b.dtype.kind not in "fc":
        if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
            differing = int(sum(_text(x) != _text(y) for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())))
        else:
            differing = int(np.count_nonzero(a != b))
        return OutputError(name, float(differing), float(differing), 1.0 if not differing else 0.0,
                           mismatched_values=differing)
    a64, b64 = _real(a), _real(b)
    finite_a, finite_b = np.isfinite(a64), np.isfinite(b64)
    both = finite_a & finite_b
    special = ~(finite_a & finite_b)
    agree_special = (np.isnan(a64) & np.isnan(b64)) | ((a64 == b64) & ~finite_a)
    mismatched_special = int(np.count_nonzero(special & ~agree_special))
    if not both.any():
        return OutputError(name, 0.0, 0.0, 1.0, mismatched_special=mismatched_special)
    x, y = a64[both], b64[both]
    max_abs = float(np.max(np.abs(x - y)))
    magnitude = float(np.max(np.abs(x)))
    max_rel = max_abs / magnitude if magnitude > 0 else max_abs
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    cosine = float(np.dot(x, y) / norms) if norms > 0 else (1.0 if max_abs == 0 else 0.0)
    dtype = a.dtype if a.dtype.kind == "f" else None
    return OutputError(name, max_abs, max_rel, cosine, magnitude, mismatched_special, dtype=dtype)


def compare_outputs(expected: Mapping[str, Any], got: Mapping[str, Any],
                    tolerance: Tolerance | None = None) -> list[OutputError]:
    """One :class:`OutputError` per output of ``expected`` (a missing output is a problem); those
    ``tolerance`` names as unordered compared as sets of rows (:func:`row_set_error`)."""
    errors = []
    for name, reference in expected.items():
        if name not in got:
            errors.append(OutputError(name, np.inf, np.inf, 0.0, problem="missing"))
        elif tolerance is not None and name in tolerance.unordered:
            errors.append(row_set_error(name, reference, got[name], tolerance))
        else:
            errors.append(output_error(name, reference, got[name]))
    return errors


_MAX_ROWS = 4096  # a detector's boxes after TopK or NMS; larger outputs are compared element by element
_CHUNK_ELEMENTS = 1 << 22  # of the distance computation: 32 MB of float64 at a time
_REORDERED_SHARE = 0.1  # of an output's rows that two runs of the reference may not share and still be "reordered"


def _rows(array: np.ndarray) -> np.ndarray | None:
    """``array`` as rows along every axis but the last (a vector: one value per row), or None
    where that is not a few rows of finite real numbers."""
    if array.ndim == 0 or array.dtype.kind not in "fiub":
        return None
    rows = array.reshape(-1, array.shape[-1]) if array.ndim >= 2 else array.reshape(-1, 1)
    if not 1 < len(rows) <= _MAX_ROWS or rows.shape[1] == 0:
        return None
    if rows.dtype.kind == "f" and not np.all(np.isfinite(rows)):
        return None
    return rows


def row_set_error(name: str, expected: Any, got: Any, tolerance: Tolerance) -> OutputError:
    """How ``got`` differs from ``expected`` with its rows (along every axis but the last) taken in
    any order: each row is paired with its nearest row on the other side (largest absolute
    difference), and a row farther from every row there than ``tolerance`` allows (without spread)
    counts in ``mismatched_values``, on both sides; ``max_abs`` is the worst paired distance within
    it. Rows that traded places count nothing; a row missing, added or moved counts. Outputs that
    are not a few rows of finite numbers are compared element by element."""
    a, b = np.asarray(expected), np.asarray(got)
    first, second = (_rows(a), _rows(b)) if a.shape == b.shape else (None, None)
    if first is None or second is None:
        return output_error(name, a, b)
    x, y = first.astype(np.float64), second.astype(np.float64)
    floats = a.dtype.kind in "fc" or b.dtype.kind in "fc"
    magnitude = float(np.abs(x).max()) if floats else 0.0
    dtype = a.dtype if a.dtype.kind == "f" else None
    limit = dataclasses.replace(tolerance, spread=None).allowed(name, magnitude, dtype) if floats else 0.0
    to_y, matched = _nearest(x, y)
    to_x, _ = _nearest(y, x)
    unmatched = int(np.count_nonzero(to_y > limit) + np.count_nonzero(to_x > limit))
    paired = np.concatenate([to_y[to_y <= limit], to_x[to_x <= limit]])
    max_abs = float(paired.max()) if paired.size else 0.0
    pairs = x.reshape(-1), y[matched].reshape(-1)
    norms = float(np.linalg.norm(pairs[0]) * np.linalg.norm(pairs[1]))
    cosine = float(pairs[0] @ pairs[1] / norms) if norms > 0 else (1.0 if not unmatched else 0.0)
    return OutputError(name, max_abs, max_abs / magnitude if magnitude > 0 else max_abs, cosine, magnitude,
                       mismatched_values=unmatched, dtype=dtype, unordered=True)


def _nearest(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``x``: the largest absolute difference from its nearest row of ``y``, and
    that row's index."""
    distance, which = np.empty(len(x)), np.empty(len(x), np.intp)
    chunk = max(1, _CHUNK_ELEMENTS // (len(y) * x.shape[1]))
    for start in range(0, len(x), chunk):
        gaps = np.abs(x[start:start + chunk, None, :] - y[None, :, :]).max(axis=2)
        nearest = gaps.argmin(axis=1)
        which[start:start + chunk] = nearest
        distance[start:start + chunk] = gaps[np.arange(len(gaps)), nearest]
    return distance, which


def unordered_outputs(first: Mapping[str, Any], second: Mapping[str, Any], tolerance: Tolerance) -> dict[str, float]:
    """Outputs whose two runs of the reference differ element by element beyond ``tolerance``
    (without spread) but hold nearly the same rows in another order, as a TopK or NMS orders
    near-tied scores (at most :data:`_REORDERED_SHARE` of the rows without a counterpart: ties at
    the cut of a top-k): name -> the number of rows without one, their spread as sets."""
    strict = dataclasses.replace(tolerance, spread=None)
    found = {}
    for name, reference in first.items():
        if name not in second or output_error(name, reference, second[name]).within(strict):
            continue
        rows = row_set_error(name, reference, second[name], strict)
        if not rows.unordered:
            continue
        count = len(_rows(np.asarray(reference)))
        # Reordered: fewer rows unpaired as a set than differ in place (a few rows that changed,
        # where they are, is no reordering: a flipped rounding), and those few.
        if rows.mismatched_values / 2 < _moved_rows(reference, second[name], strict) and \
                rows.mismatched_values <= _REORDERED_SHARE * 2 * count:
            found[name] = float(rows.mismatched_values)
    return found


def _moved_rows(expected: Any, got: Any, tolerance: Tolerance) -> int:
    """Rows that differ from the row in the same place by more than ``tolerance`` allows."""
    x, y = _rows(np.asarray(expected)).astype(np.float64), _rows(np.asarray(got)).astype(np.float64)
    magnitude = float(np.abs(x).max()) if x.size else 0.0
    dtype = np.asarray(expected).dtype
    limit = tolerance.allowed(name="", magnitude=magnitude, dtype=dtype if dtype.kind == "f" else None)
    return int(np.count_nonzero(np.abs(x - y).max(axis=1) > limit))


def spread_of(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, float]:
    """Per output, the largest finite difference between two runs of the reference."""
    spread = {}
    for error in compare_outputs(first, second):
        if error.problem is None and np.isfinite(error.max_abs):
            spread[error.name] = error.max_abs
    return spread


def _real(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "c":
        return np.concatenate([array.real.reshape(-1), array.imag.reshape(-1)]).astype(np.float64)
    return array.astype(np.float64).reshape(-1)


# Engines checked against the numpy engine (engine='auto', the int8 form chosen at load): the
# largest error allowed, relative to the largest magnitude of the output, per precision policy.
# float32 reassociation stays far below 1e-3; bf16 keeps 8 significant bits (~0.4% a rounding)
# and the errors of a deep network add up to a few of those.
TOLERANCES = {"exact": 1e-3, "fp16": 1e-2, "bf16": 5e-2}
# Quantized models: engines may round a value the other way at a requantization step (1/255 of
# a range) and such steps propagate through the layers. On int8 MobileNetV2 (random weights and
# calibration) ONNX Runtime ends 3% of the peak away from the numpy engine and OpenVINO 5%, both
# with the same top-5 classes; a wrong kernel is off by the order of the peak itself.
QUANTIZED_TOLERANCE = 1e-1


def agreement(expected: Mapping[str, Any], got: Mapping[str, Any], tolerance: float) -> tuple[float, str | None]:
    """Largest error relative to each output's peak magnitude, and why it fails (None: it agrees).

    The comparison is lite.compare's (IEEE-aware); integer outputs may differ in 1 % of their
    elements under a precision policy looser than exact (rounding before a cast), in none otherwise.
    """
    worst = 0.0
    for error in compare_outputs(expected, got):
        name = error.name
        if error.problem is not None:
            return float("inf"), f"output {name!r}: {error.problem} (the numpy engine's)"
        if error.mismatched_special:
            return float("inf"), f"output {name!r}: NaN or infinity where the numpy engine has numbers (or the reverse)"
        reference = np.asarray(expected[name])
        if reference.dtype.kind not in "fc":  # integer or boolean: compared as values, whatever got's type
            mismatched = float(np.mean(reference != np.asarray(got[name]))) if reference.size else 0.0
            worst = max(worst, mismatched)
            allowed = 0.0 if tolerance <= TOLERANCES["exact"] else 0.01
            if mismatched > allowed:
                return worst, f"output {name!r}: {mismatched:.2%} of the elements differ from the numpy engine"
            continue
        worst = max(worst, error.max_rel)
        if error.max_rel > tolerance:
            return worst, (f"output {name!r}: max error {error.max_rel:.3g} of the output's peak {error.magnitude:.3g}, "
                           f"tolerance {tolerance:g}")
    return worst, None
