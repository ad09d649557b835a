"""MaxPool, AveragePool, LpPool and the global pools against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_onnxruntime, check_against_reference

rng = np.random.default_rng(99)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


POOL_CASES = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 7), {"kernel_shape": [3, 3], "strides": [3, 2], "pads": [1, 0, 1, 2], "ceil_mode": 1}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 10, 9), {"kernel_shape": [2, 2], "dilations": [2, 3], "strides": [1, 2]}),
    ((1, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("shape, attributes", POOL_CASES)
def test_max_pool(shape, attributes):
    if attributes.get("auto_pad") == "SAME_LOWER":
        # onnx.reference computes a smaller output for SAME_LOWER than the spec's ceil(in / stride).
        check_against_onnxruntime("MaxPool", [normal(*shape)], attributes, opset=12)
    else:
        check_against_reference("MaxPool", [normal(*shape)], attributes, opset=12)


@pytest.mark.parametrize("shape, attributes", POOL_CASES[:4] + POOL_CASES[7:])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(shape, attributes, storage_order):
    # onnx.reference sometimes fails on Indices (NaN padding cast to int); ONNX Runtime is the oracle.
    attributes = {**attributes, "storage_order": storage_order}
    check_against_onnxruntime("MaxPool", [normal(*shape)], attributes, opset=12, output_count=2)


def test_max_pool_int8():
    x = rng.integers(-128, 128, size=(1, 2, 7, 7)).astype(np.int8)
    # onnx.reference pads integer inputs with NaN and fails.
    check_against_onnxruntime("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, opset=12)


@pytest.mark.parametrize("shape, attributes", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(shape, attributes, count_include_pad):
    attributes = {**attributes, "count_include_pad": count_include_pad}
    opset = 19 if "dilations" in attributes else 11
    check_against_reference("AveragePool", [normal(*shape)], attributes, opset=opset)


@pytest.mark.parametrize("shape, attributes", [c for c in POOL_CASES if "auto_pad" not in c[1]])
def test_lp_pool(shape, attributes):
    opset = 18 if ("dilations" in attributes or "ceil_mode" in attributes) else 11
    if attributes.get("ceil_mode"):
        # onnx.reference scales a partial ceil_mode window's mean by the full kernel size.
        check_against_onnxruntime("LpPool", [normal(*shape)], {**attributes, "p": 3}, opset=opset, rtol=1e-3)
    else:
        check_against_reference("LpPool", [normal(*shape)], {**attributes, "p": 3}, opset=opset, rtol=1e-3)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 2, 7), (1, 2, 3, 4, 2)])
def test_global_pools(op, shape):
    # onnx.reference has no GlobalLpPool, and its GlobalMaxPool assumes 2-D images.
    if op == "GlobalLpPool" or (op == "GlobalMaxPool" and len(shape) != 4):
        check_against_onnxruntime(op, [normal(*shape)], {}, opset=2)
    else:
        check_against_reference(op, [normal(*shape)], {}, opset=2)


def test_average_pool_against_onnxruntime_ceil_mode_with_pads():
    pytest.importorskip("onnxruntime")
    attributes = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
                  "count_include_pad": 1}
    check_against_onnxruntime("AveragePool", [normal(1, 2, 8, 8)], attributes, opset=19)


def test_a_pooling_window_of_absurd_size_is_a_kernel_error_not_hours_of_work():
    """auto_pad SAME makes any kernel_shape spec-valid (the pads grow with it); a fuzzed
    [2**40, 2**31 - 1] window made the numpy engine loop for hours."""
    import pytest

    from lite.errors import KernelError
    from lite.ops.max_pool import MaxPool

    x = np.zeros((2, 6, 10, 8), np.float32)
    with pytest.raises(KernelError, match="kernel_shape"):
        MaxPool(x, kernel_shape=[1 << 40, (1 << 31) - 1], auto_pad="SAME_UPPER", strides=[2, 2])


@pytest.mark.parametrize("shape, attributes", [
    # transformers' EfficientNet: a 640x640 ceil-mode window over a 2x2 map.
    ((1, 3, 2, 2), {"kernel_shape": [640, 640], "strides": [640, 640], "ceil_mode": 1}),
    ((1, 2, 7, 6), {"kernel_shape": [9, 5], "strides": [4, 3], "pads": [3, 2, 4, 1], "ceil_mode": 1,
                    "dilations": [2, 1]}),
])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_windows_mostly_outside_the_input_visit_only_taps_that_reach_it(shape, attributes, count_include_pad):
    """A window far larger than its input costs its live taps (the 640x640 one took 23 s)."""
    pytest.importorskip("onnxruntime")
    check_against_onnxruntime("AveragePool", [normal(*shape)], dict(attributes, count_include_pad=count_include_pad),
                              opset=19)


@pytest.mark.parametrize("shape, attributes", [
    ((1, 4, 32, 32), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # a kept padded buffer
    ((1, 64, 64, 64), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # too large to keep
    ((2, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, -1, 1]}),  # a negative pad crops
])
def test_max_pool_of_images_reuses_its_padding_and_never_reads_stale_data(shape, attributes):
    """The -inf border of a kept padded buffer is filled once; every call writes the interior."""
    from lite.ops._pool_common import pool_geometry
    from lite.ops.max_pool import MaxPool, _separable_max

    for dtype in (np.float32, np.float16):
        for _ in range(2):
            x = normal(*shape, dtype=dtype)
            if min(attributes["pads"]) >= 0:
                check_against_reference("MaxPool", [x], attributes, opset=12)
            geometry = pool_geometry("MaxPool", x, kernel_shape=attributes["kernel_shape"],
                                     strides=attributes["strides"], dilations=None, auto_pad="NOTSET",
                                     pads=attributes["pads"], ceil_mode=0)
            np.testing.assert_array_equal(MaxPool(x, **attributes), _separable_max(x, geometry, np.empty))


@pytest.mark.parametrize("shape, kernel", [((1, 40, 16, 16), [2, 2]), ((2, 3, 10, 9), [3, 2]), ((1, 2, 5, 5), [1, 1]),
                                           ((1, 4, 12), [4]), ((1, 2, 4, 6, 6), [2, 3, 2])])
def test_average_pool_of_windows_that_tile_the_input(shape, kernel):
    """kernel == stride without pads: sums of strided slices (lite.ops._pool_common.tile_sum);
    the input is left as it was."""
    from lite.ops.average_pool import AveragePool

    x = normal(*shape)
    before = x.copy()
    check_against_reference("AveragePool", [x], {"kernel_shape": kernel, "strides": kernel}, opset=11)
    AveragePool(x, kernel_shape=kernel, strides=kernel)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("shape", [(1, 3, 7, 5), (2, 2, 1, 1), (1, 4, 1, 6), (1, 1, 2, 9), (1, 32, 16, 16)])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_3x3_same_size_sums_by_shifted_slices(shape, count_include_pad):
    """3x3, stride 1, pads 1 (PoolFormer's mixer) takes lite.ops._pool_common.same_size_3x3_sum:
    against onnx.reference, and against the general path on a channels-last input (a
    non-contiguous view); the input is left as it was."""
    from lite.ops._pool_common import pool_geometry
    from lite.ops.average_pool import AveragePool

    attributes = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": count_include_pad}
    x = normal(*shape)
    before = x.copy()
    check_against_reference("AveragePool", [x], attributes, opset=11)
    AveragePool(x, **attributes)
    np.testing.assert_array_equal(x, before)
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(AveragePool(channels_last, **attributes), AveragePool(x, **attributes), rtol=1e-6)
    # The same window written with explicit strides and dilations of 1 is the same geometry.
    geometry = pool_geometry("AveragePool", x, kernel_shape=[3, 3], strides=[1, 1], dilations=[1, 1],
                             auto_pad="NOTSET", pads=[1, 1, 1, 1], ceil_mode=0)
    assert geometry.same_size_3x3()


@pytest.mark.parametrize("attributes", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "dilations": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [0, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
])
def test_average_pool_other_windows_decline_the_3x3_same_size_path(attributes):
    from lite.ops._pool_common import pool_geometry

    x = normal(1, 2, 9, 7)
    geometry = pool_geometry("AveragePool", x, kernel_shape=attributes["kernel_shape"],
                             strides=attributes.get("strides"), dilations=attributes.get("dilations"),
                             auto_pad=attributes.get("auto_pad", "NOTSET"), pads=attributes.get("pads"),
                             ceil_mode=attributes.get("ceil_mode", 0))
    assert not geometry.same_size_3x3()
    check_against_reference("AveragePool", [x], {**attributes, "count_include_pad": 1}, opset=19)


@pytest.mark.parametrize("shape, attributes", [
    ((1, 32, 32, 32), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 11, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),  # no pads, ceil overhang
    ((2, 5, 9, 7), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 3, 13, 10), {"kernel_shape": [3, 2], "strides": [3, 1], "pads": [1, 0, 2, 1], "dilations": [2, 3]}),
    ((1, 4, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # the input itself is the buffer
    ((1, 2, 5, 6), {"kernel_shape": [5, 6], "strides": [1, 1]}),  # one window per plane
])
def test_max_pool_flat_shifts_match_the_general_path(shape, attributes):
    """lite.ops._shifted_max (taps as shifts of the flat input, the windows crossing its edges
    worked out again) against ONNX Runtime and the general separable path, with NaN and -inf
    cells, and on a channels-last input (copied to a contiguous one first)."""
    from lite.ops._pool_common import pool_geometry
    from lite.ops.max_pool import MaxPool, _separable_max

    x = normal(*shape)
    x.reshape(-1)[::7] = np.nan
    x.reshape(-1)[3::11] = -np.inf
    geometry = pool_geometry("MaxPool", x, kernel_shape=attributes["kernel_shape"], strides=attributes["strides"],
                             dilations=attributes.get("dilations"), auto_pad="NOTSET", pads=attributes.get("pads"),
                             ceil_mode=attributes.get("ceil_mode", 0))
    expected = _separable_max(x, geometry, np.empty)
    np.testing.assert_array_equal(MaxPool(x, **attributes), expected)
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(MaxPool(channels_last, **attributes), expected)
    # onnx.reference gets the output shape of a padded stride-1 ceil_mode pool wrong; ONNX Runtime does not.
    check_against_onnxruntime("MaxPool", [normal(*shape)], attributes, opset=12)


@pytest.mark.parametrize("shape, attributes", [
    ((1, 3, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # BiT's stem
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 1, 1], "ceil_mode": 1}),  # HGNetV2's
    ((2, 2, 8, 10), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [0, 0, 0, 2], "ceil_mode": 1}),  # overhang
    ((1, 2, 9, 6), {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 2, 2, 1], "dilations": [3, 2]}),
    ((1, 2, 3, 4), {"kernel_shape": [4, 4], "strides": [1, 1], "pads": [2, 2, 1, 1]}),  # windows past both edges
])
@pytest.mark.parametrize("fill", [0.0, 0.5, -np.inf])
def test_max_pool_with_padding_that_counts_matches_the_padded_input(shape, attributes, fill):
    """lite.ops._shifted_max with a ``fill`` (a constant Pad folded into the pool): the pool of
    the input padded by ``fill``, the ceil-mode overhang past it still never counting."""
    from lite.ops._pool_common import pool_geometry
    from lite.ops._shifted_max import shifted_max_2d
    from lite.ops.max_pool import _separable_max

    x = normal(*shape)
    x.reshape(-1)[::7] = np.nan
    common = {"kernel_shape": attributes["kernel_shape"], "strides": attributes["strides"],
              "dilations": attributes.get("dilations"), "auto_pad": "NOTSET", "ceil_mode": attributes.get("ceil_mode", 0)}
    geometry = pool_geometry("MaxPool", x, pads=attributes["pads"], **common)
    top, left, bottom, right = attributes["pads"]
    padded = np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], constant_values=fill)
    expected = _separable_max(padded, pool_geometry("MaxPool", padded, pads=None, **common), np.empty)
    np.testing.assert_array_equal(shifted_max_2d(x, geometry, np.empty, np.float32(fill)), expected)


def test_max_pool_windows_larger_than_the_input_answer_at_once():
    """A window overhanging the input is sized as ONNX Runtime sizes it (below); an absurd kernel
    is refused before any loop over its taps (a damaged file's kernel of 4e9 columns took seconds
    and gigabytes building one view per tap)."""
    from lite.errors import KernelError
    from lite.ops.max_pool import MaxPool

    x = np.ones((2, 3, 5, 5), np.float32)
    y, indices = MaxPool(x, kernel_shape=[2, 6], strides=[2, 2], output_count=2)
    assert y.shape == (2, 3, 2, 1) and indices.shape == (2, 3, 2, 1)
    assert MaxPool(x, kernel_shape=[2, 8], strides=[2, 2]).shape == (2, 3, 2, 0)
    with pytest.raises(KernelError, match="cells past the input"):
        MaxPool(x, kernel_shape=[2, 4278190082], strides=[2, 4278190082])
    with pytest.raises(KernelError, match="larger than the input"):
        MaxPool(x, kernel_shape=[2, 9], strides=[2, 2])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize(("spatial", "attributes"), [
    ((2, 2), {"kernel_shape": [3, 3], "strides": [2, 2]}),  # overhangs by less than a stride: one cell
    ((1, 1), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((5, 5), {"kernel_shape": [2, 6], "strides": [2, 2]}),
    ((2, 3), {"kernel_shape": [5, 5], "strides": [4, 4]}),
    ((3, 3), {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2]}),
    ((2, 2), {"kernel_shape": [4, 4], "strides": [3, 3], "pads": [1, 0, 0, 1]}),
    ((5, 5), {"kernel_shape": [2, 8], "strides": [2, 2]}),  # by one to two strides: no cell
])
def test_windows_overhanging_a_small_input_match_onnxruntime(op, spatial, attributes):
    """ONNX Runtime sizes a floor-mode pool by C's division, toward zero: the model a user checks
    against it on a small image gets the same cells (onnx.reference follows the spec's floor)."""
    if op != "MaxPool" and "dilations" in attributes:
        attributes = {key: value for key, value in attributes.items() if key != "dilations"}
    x = np.random.default_rng(3).standard_normal((1, 2, *spatial)).astype(np.float32)
    check_against_onnxruntime(op, [x], attributes, opset=18)
    if op == "AveragePool":
        check_against_onnxruntime(op, [x], {**attributes, "count_include_pad": 1}, opset=18)
