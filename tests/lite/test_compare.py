"""lite.compare: IEEE-aware output comparison with a relative tolerance, a floor and a spread."""

from __future__ import annotations

import numpy as np

from lite.compare import Tolerance, compare_outputs, output_error, row_set_error, spread_of, unordered_outputs


def test_nan_where_the_reference_has_nan_and_equal_infinities_agree():
    reference = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    error = output_error("y", reference, reference.copy())
    assert error.within(Tolerance()) and error.max_abs == 0 and error.mismatched_special == 0


def test_nan_or_infinity_on_one_side_only_fails():
    reference = np.array([np.nan, 2.0, np.inf, 1.0])
    for got in ([1.0, 2.0, np.inf, 1.0], [np.nan, np.nan, np.inf, 1.0], [np.nan, 2.0, -np.inf, 1.0]):
        error = output_error("y", reference, np.array(got))
        assert error.mismatched_special == 1 and not error.within(Tolerance(rtol=1.0, atol=1.0))


def test_the_absolute_floor_accepts_float32_noise_on_tiny_outputs():
    reference = np.array([5.7e-7, 1e-9], np.float64)
    got = reference + np.array([3.33e-8, 0.0])
    error = output_error("score", reference, got)
    assert error.max_rel > 0.05  # relative to its peak the difference looks large...
    assert error.within(Tolerance(rtol=1e-4, atol=1e-6))  # ...but is below the floor
    assert not error.within(Tolerance(rtol=1e-4, atol=1e-9))


def test_the_reference_spread_widens_the_tolerance_for_that_output_only():
    reference = {"a": np.array([1.0, 2.0]), "b": np.array([1.0, 2.0])}
    moved = {"a": np.array([1.05, 2.0]), "b": np.array([1.0, 2.0])}
    spread = spread_of(reference, moved)
    assert spread == {"a": 0.050000000000000044, "b": 0.0}
    candidate = {"a": np.array([1.08, 2.0]), "b": np.array([1.08, 2.0])}
    tolerance = Tolerance(rtol=1e-4, spread=spread)
    verdicts = {e.name: e.within(tolerance) for e in compare_outputs(reference, candidate)}
    assert verdicts == {"a": True, "b": False}


def test_integer_outputs_must_be_equal_and_shapes_must_match():
    assert not output_error("i", np.array([1, 2]), np.array([1, 3])).within(Tolerance(rtol=1.0))
    assert output_error("i", np.array([1, 2]), np.array([1, 2])).within(Tolerance())
    assert "shape" in output_error("x", np.zeros((2, 3)), np.zeros((3, 2))).describe(Tolerance())
    (missing,) = compare_outputs({"y": np.zeros(2)}, {})
    assert missing.problem == "missing" and not missing.within(Tolerance())
    strings = output_error("s", np.array(["a", "b"], object), np.array(["a", "c"], object))
    assert strings.mismatched_values == 1


def test_integer_outputs_may_differ_where_the_reference_s_own_runs_do():
    """A detector's labels after near-tied scores: the reference with and without its optimizations
    flips 3 of them, so up to spread_factor x 3 may differ; 7 may not, and no label output of a
    reference that never flips may differ at all."""
    reference = {"labels": np.arange(20), "steady": np.arange(20)}
    flipped = {"labels": np.where(np.arange(20) < 3, 99, np.arange(20)), "steady": np.arange(20)}
    tolerance = Tolerance(spread=spread_of(reference, flipped), spread_factor=2.0)
    assert tolerance.allowed_mismatches("labels") == 6 and tolerance.allowed_mismatches("steady") == 0
    for differing, ok in ((6, True), (7, False)):
        got = np.where(np.arange(20) < differing, -1, np.arange(20))
        error = output_error("labels", reference["labels"], got)
        assert error.within(tolerance) is ok, differing
    failing = output_error("labels", reference["labels"], np.full(20, -1))
    assert "the reference's own runs differ in 3; 6 allowed" in failing.describe(tolerance)
    assert not output_error("steady", reference["steady"], np.zeros(20, int)).within(tolerance)


def _detections(seed: int, rows: int = 40) -> np.ndarray:
    """(1, rows, 6): boxes, a score and a class, as a detector's TopK or NMS leaves them."""
    r = np.random.default_rng(seed)
    boxes = r.uniform(0, 640, (rows, 4))
    return np.concatenate([boxes, r.uniform(0, 1, (rows, 1)), r.integers(0, 80, (rows, 1))], 1)[None].astype(np.float32)


def test_rows_that_trade_places_are_one_set_and_a_moved_row_is_not():
    reference = _detections(0)
    shuffled = reference[:, np.random.default_rng(1).permutation(40)]
    assert not output_error("d", reference, shuffled).within(Tolerance())  # element by element: far apart
    error = row_set_error("d", reference, shuffled, Tolerance())
    assert error.unordered and error.mismatched_values == 0 and error.within(Tolerance()) and error.cosine == 1.0
    moved = shuffled.copy()
    moved[0, 3, 0] += 5.0  # one box shifted by 5 pixels: unpaired on both sides
    assert row_set_error("d", reference, moved, Tolerance()).mismatched_values == 2


def test_outputs_the_reference_reorders_are_compared_as_sets_with_the_set_spread():
    """The reference's two runs swap near-tied rows and differ in one row at a top-k's cut: the
    output is unordered with a spread of 2 unpaired rows; a conversion that reorders rows passes,
    one whose rows are wrong fails however far the runs move element by element."""
    first = _detections(0)
    second = first[:, np.random.default_rng(2).permutation(40)].copy()
    second[0, 7] = _detections(3)[0, 0]  # another box made the cut
    spread = unordered_outputs({"d": first}, {"d": second}, Tolerance())
    assert spread == {"d": 2.0}
    tolerance = Tolerance(spread=spread, unordered=frozenset(spread))
    reordered = first[:, ::-1]
    (ok,) = compare_outputs({"d": first}, {"d": reordered}, tolerance)
    assert ok.within(tolerance), ok
    wrong = first.copy()
    wrong[0, :, 4] = 0.0  # every score lost
    (bad,) = compare_outputs({"d": first}, {"d": wrong}, tolerance)
    # (a score already within 1e-4 of the output's peak of 640 from 0 still pairs: 78 of 80)
    assert not bad.within(tolerance) and "78 rows have no counterpart in any order" in bad.describe(tolerance)
    unrelated = {"d": _detections(4)}  # runs that share no rows are not a reordering
    assert unordered_outputs({"d": first}, unrelated, Tolerance()) == {}
