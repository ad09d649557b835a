"""ONNX backend conformance: every case through convert -> .lite -> verified load -> engine.

The cases are onnx's own (1,884 node cases built in memory, plus the 'simple', 'pytorch-converted'
and 'pytorch-operator' sets its wheel ships). A case either passes or is listed in
exclusions.py with the reason (regenerate with ``python -m tests.conformance.survey --write``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.conformance.exclusions import EXCLUSIONS
from tests.conformance.onnxruntime_differences import ONNXRUNTIME_DIFFERS
from tests.conformance.runner import all_case_names, load_case, run_case, to_array

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    NAMES = all_case_names()
RUNNABLE = [name for name in NAMES if name not in EXCLUSIONS]


@pytest.mark.parametrize("name", NAMES)
def test_case_on_the_numpy_engine(name):
    if name in EXCLUSIONS:
        pytest.skip(EXCLUSIONS[name])
    run_case(load_case(name))


def test_goal_of_1500_node_cases_is_met():
    # Every node case not excluded is asserted by the test above, so this bound is real.
    node = [name for name in NAMES if "/" not in name]
    assert len(node) == 1884
    passing = len(node) - sum(name in EXCLUSIONS for name in node)
    assert passing >= 1500, f"only {passing} node cases pass"


def test_every_exclusion_names_a_case_and_has_a_reason():
    assert set(EXCLUSIONS) <= set(NAMES)
    assert set(ONNXRUNTIME_DIFFERS) <= set(RUNNABLE)
    assert all(reason and not reason.startswith("UNEXPLAINED") for reason in EXCLUSIONS.values())


# Engines agree: the numpy engine against ONNX Runtime's CPU provider on the same .lite model.
TOLERANCE = {"f": (1e-3, 1e-4), "c": (1e-3, 1e-4)}


@pytest.mark.parametrize("name", RUNNABLE)
def test_numpy_and_onnx_runtime_agree(name):
    pytest.importorskip("onnxruntime", reason="needs onnxruntime (the ort extra)")
    if name in ONNXRUNTIME_DIFFERS:
        pytest.skip(f"known ONNX Runtime difference: {ONNXRUNTIME_DIFFERS[name]}")
    import lite
    from converter import convert_model
    from lite.format import to_bytes

    case = load_case(name)
    data = to_bytes(convert_model(case.model, optimize=False))
    try:
        ort_model = lite.Model.load(data, device="cpu", cache_dir=None)
    except lite.UnsupportedOpError as err:  # a typed refusal (unknown op version, locale, layout...)
        pytest.skip(str(err)[:200])
    numpy_model = lite.Model.load(data, device="numpy")
    initializers = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    inputs, _ = case.data_sets[0]
    feeds = {n: to_array(v) for n, v in zip(names, inputs)}
    got = ort_model.predict(feeds)
    want = numpy_model.predict(feeds)
    for output, expected in want.items():
        compare_outputs(output, got[output], expected)


def compare_outputs(name, got, expected):
    if isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), name
        for g, e in zip(got, expected):
            compare_outputs(name, g, e)
        return
    if expected is None:
        assert got is None, name
        return
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{name}: {got.shape} vs {expected.shape}"
    if expected.dtype == object:
        decode = np.frompyfunc(lambda v: v.decode() if isinstance(v, bytes) else str(v), 1, 1)
        assert np.array_equal(np.asarray(decode(got), dtype=object), np.asarray(decode(expected), dtype=object)), name
    elif expected.dtype.kind in TOLERANCE:
        rtol, atol = TOLERANCE[expected.dtype.kind]
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=name)


# The default `lite convert` path: optimization passes and verification on. A case that passes
# above must also convert here: verification may be skipped (ONNX Runtime cannot run it, or the
# inputs it can make are outside what the case accepts) but must never fail a correct conversion.
NODE_RUNNABLE = [name for name in RUNNABLE if "/" not in name]


@pytest.mark.slow
@pytest.mark.parametrize("name", NODE_RUNNABLE)
def test_case_through_the_default_convert_path(name, tmp_path):
    pytest.importorskip("onnxruntime", reason="verification needs onnxruntime (the ort extra)")
    import converter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = converter.convert(load_case(name).model, tmp_path / "m.lite")
    assert report.verification is not None and report.verification.status in ("passed", "skipped")


def test_goal_of_1600_node_cases_through_the_default_path_is_met():
    # test_case_through_the_default_convert_path asserts each of these, so this bound is real.
    assert len(NODE_RUNNABLE) >= 1600
