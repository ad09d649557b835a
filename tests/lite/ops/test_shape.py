"""Shape and data-movement kernels (Reshape ... SpaceToDepth) against onnx.reference on fresh
random inputs (Shape, Size, Cast and constants: test_cast_and_constants.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import KernelError
from tests.lite.ops._checks_core import check
from tests.lite.ops._reference import check_against_onnxruntime, kernel_outputs

rng = np.random.default_rng(5)
F32 = np.float32
I64 = np.int64


def normal(shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def ints(*values):
    return np.array(values, dtype=I64)


# --- Reshape, Flatten, Squeeze, Unsqueeze, Transpose ------------------------------------------


@pytest.mark.parametrize("opset", [5, 13, 14, 21])
@pytest.mark.parametrize("shape", [(4, 6), (-1,), (0, -1), (2, 0, 4), (24,), (2, 3, -1), (1, 24, 1)])
def test_reshape(opset, shape):
    check("Reshape", [normal((2, 3, 4)), np.array(shape, dtype=I64)], opset=opset)


def test_reshape_allowzero():
    x = np.zeros((0, 3), dtype=F32)
    check("Reshape", [x, ints(3, 0)], {"allowzero": 1}, opset=14)
    check("Reshape", [normal((2, 3)), ints(0, 3)], {"allowzero": 0}, opset=14)


def test_reshape_errors_name_the_op():
    with pytest.raises(KernelError, match="Reshape"):
        kernel_outputs("Reshape", [normal((2, 3)), ints(4, -1)], {}, opset=14)
    with pytest.raises(KernelError, match="Reshape"):
        kernel_outputs("Reshape", [normal((2, 3)), ints(-1, -1)], {}, opset=14)


def test_reshape_1_attribute():
    (result,) = kernel_outputs("Reshape", [normal((2, 3, 4))], {"shape": [0, -1]}, opset=1)
    assert result.shape == (2, 12)


@pytest.mark.parametrize("opset", [1, 9, 11, 13, 21])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(opset, axis):
    if opset < 11 and axis < 0:
        axis += 3
    check("Flatten", [normal((2, 3, 4))], {"axis": axis}, opset=opset)


@pytest.mark.parametrize("opset", [1, 11, 13, 21])
@pytest.mark.parametrize("axes", [None, [0], [2, 0], [-1]])
def test_squeeze(opset, axes):
    if opset < 11 and axes == [-1]:
        axes = [3]
    x = normal((1, 3, 1, 1))
    if opset >= 13:
        check("Squeeze", [x, None if axes is None else np.array(axes, dtype=I64)], opset=opset)
    else:
        check("Squeeze", [x], {} if axes is None else {"axes": axes}, opset=opset)


def test_squeeze_rejects_non_unit_axis():
    with pytest.raises(KernelError, match="Squeeze"):
        kernel_outputs("Squeeze", [normal((2, 3)), ints(0)], {}, opset=13)


@pytest.mark.parametrize("opset", [1, 11, 13, 21])
@pytest.mark.parametrize("axes", [[0], [2, 0], [-1], [1, 4]])
def test_unsqueeze(opset, axes):
    if opset < 11 and axes == [-1]:
        axes = [3]
    x = normal((3, 4, 2))
    if opset >= 13:
        check("Unsqueeze", [x, np.array(axes, dtype=I64)], opset=opset)
    else:
        # onnx.reference inserts unsorted attribute axes one by one, in the given order;
        # the spec (and ONNX Runtime) read them as positions in the output.
        check_against_onnxruntime("Unsqueeze", [x], {"axes": axes}, opset=opset, rtol=0, atol=0)


@pytest.mark.parametrize("perm", [None, [0, 1, 2], [2, 0, 1], [1, 0, 2]])
def test_transpose(perm):
    check("Transpose", [normal((2, 3, 4))], {} if perm is None else {"perm": perm}, opset=13)


@pytest.mark.parametrize("perm", [[0, -1, 1], [0, 0, 1], [0, 1, 3], [1, 0]])
def test_transpose_refuses_what_is_not_a_permutation_of_the_axes(perm):
    """numpy would take [0, -1, 1]; the spec wants a permutation of 0..rank-1."""
    from lite.ops.transpose import Transpose

    with pytest.raises(KernelError, match="not a permutation"):
        Transpose(normal((2, 3, 4)), perm=perm)


# --- Concat, Split, Slice ---------------------------------------------------------------------


@pytest.mark.parametrize("opset", [4, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(opset, axis):
    if opset < 11 and axis < 0:
        axis = 2
    shapes = [(2, 3, 4)] * 3
    shapes = [tuple(n if a == axis % 3 else d for a, d in enumerate(s)) for s, n in zip(shapes, (1, 2, 3))]
    check("Concat", [normal(s) for s in shapes], {"axis": axis}, opset=opset)


def test_concat_strings_and_single_input():
    strings = np.array(["a", "b"], dtype=object)
    check("Concat", [strings, strings], {"axis": 0}, opset=13)
    check("Concat", [normal((2, 3))], {"axis": 1}, opset=13)


def test_concat_1_defaults_to_axis_1():
    (result,) = kernel_outputs("Concat", [normal((2, 3)), normal((2, 1))], {}, opset=1)
    assert result.shape == (2, 4)


@pytest.mark.parametrize("opset", [2, 11])
@pytest.mark.parametrize(
    ("axis", "split", "count"), [(0, None, 2), (1, [1, 2], 2), (-1, [1, 1, 2], 3), (2, None, 4)]
)
def test_split_attribute(opset, axis, split, count):
    if opset < 11 and axis < 0:
        axis = 2
    attributes = {"axis": axis} if split is None else {"axis": axis, "split": split}
    check("Split", [normal((4, 3, 4))], attributes, opset=opset, output_count=count)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize(
    ("axis", "split", "count"), [(0, None, 2), (1, [1, 2], 2), (-1, [1, 0, 3], 3), (2, None, 4)]
)
def test_split_input(opset, axis, split, count):
    split_tensor = None if split is None else np.array(split, dtype=I64)
    attributes = {"axis": axis}
    if opset >= 18 and split is None:
        attributes["num_outputs"] = count
    check("Split", [normal((4, 3, 4)), split_tensor], attributes, opset=opset, output_count=count)


@pytest.mark.parametrize(("dimension", "parts"), [(7, 3), (5, 2), (4, 4), (10, 4)])
def test_split_num_outputs_uneven(dimension, parts):
    check("Split", [normal((dimension, 2))], {"axis": 0, "num_outputs": parts}, opset=18, output_count=parts)


def test_split_1_takes_sizes_from_input_or_attribute():
    x = normal((5, 2))
    from_input = kernel_outputs("Split", [x, ints(2, 3)], {}, opset=1, output_count=2)
    from_attribute = kernel_outputs("Split", [x], {"split": [2, 3]}, opset=1, output_count=2)
    assert [p.shape for p in from_input] == [p.shape for p in from_attribute] == [(2, 2), (3, 2)]


SLICE_CASES = [
    ([0], [2], None, None),
    ([1, 0], [3, -1], [0, 2], None),
    ([-1], [-100], [1], [-1]),
    ([10], [-10], [2], [-2]),
    ([0, 0, 3], [2**63 - 1, 3, 0], [0, 1, 2], [2, 1, -1]),
    ([-(2**63)], [2**63 - 1], [-1], [3]),
    ([2], [1], [0], [1]),
    ([5], [-5], [1], [-1]),
]


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), SLICE_CASES)
@pytest.mark.parametrize("opset", [10, 11, 13])
def test_slice(starts, ends, axes, steps, opset):
    if opset == 10 and axes is not None:
        axes = [a % 3 for a in axes]  # negative axes arrive in opset 11
    x = normal((3, 4, 5))
    inputs = [x, np.array(starts, dtype=I64), np.array(ends, dtype=I64)]
    inputs.append(None if axes is None else np.array(axes, dtype=I64))
    inputs.append(None if steps is None else np.array(steps, dtype=I64))
    check("Slice", inputs, opset=opset)


def test_slice_1_attributes():
    check("Slice", [normal((3, 4))], {"starts": [1, 0], "ends": [3, -1]}, opset=1)
    check("Slice", [normal((3, 4))], {"starts": [1], "ends": [1000], "axes": [1]}, opset=1)


# --- Expand, Tile, Pad ------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [8, 13])
@pytest.mark.parametrize(
    ("shape", "target"), [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 3), (1, 1)), ((4, 1), (4, 1)), ((), (2, 2))]
)
def test_expand(opset, shape, target):
    check("Expand", [normal(shape), np.array(target, dtype=I64)], opset=opset)


@pytest.mark.parametrize("opset", [6, 13])
@pytest.mark.parametrize("repeats", [(1, 1), (2, 3), (0, 2), (3, 1)])
def test_tile(opset, repeats):
    check("Tile", [normal((2, 3)), np.array(repeats, dtype=I64)], opset=opset)


def test_tile_1():
    (result,) = kernel_outputs("Tile", [normal((2, 3)), ints(3), ints(1)], {}, opset=1)
    assert result.shape == (2, 9)


PAD_CASES = [
    [0, 0, 0, 0],
    [1, 2, 0, 1],
    [0, 1, 2, 0],
    [2, 1, 1, 2],
]


@pytest.mark.parametrize("pads", PAD_CASES)
@pytest.mark.parametrize(
    ("mode", "opset"),
    # wrap mode arrives in opset 19
    [(mode, opset) for mode in ("constant", "reflect", "edge") for opset in (11, 13, 18, 19, 21)]
    + [("wrap", 19), ("wrap", 21)],
)
def test_pad(pads, mode, opset):
    x = normal((3, 4))
    inputs = [x, np.array(pads, dtype=I64)]
    if mode == "constant":
        inputs.append(np.array(1.5, dtype=F32))
    check("Pad", inputs, {"mode": mode}, opset=opset)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[-1, 1, 0, -2], [1, -1, -1, 2]])
def test_pad_negative_crops(mode, pads):
    # onnx.reference cannot pad by negative amounts; ONNX Runtime crops.
    x = normal((3, 5))
    check_against_onnxruntime("Pad", [x, np.array(pads, dtype=I64)], {"mode": mode}, opset=19, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_axes(mode):
    x = normal((2, 3, 4))
    inputs = [x, ints(1, 2, 2, 0), None, ints(-1, 0)]
    check("Pad", inputs, {"mode": mode}, opset=19)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_borders_up_to_the_axis_and_past_it_match_numpy(mode):
    # Borders of one copy of the cells inside are copied slice by slice; wider ones (a reflection
    # repeated) go through np.pad. Every width from 0 to past the axis, on 1-4 axes, corners included.
    generator = np.random.default_rng(1)
    for _ in range(200):
        ndim = int(generator.integers(1, 5))
        shape = tuple(int(n) for n in generator.integers(1, 6, ndim))
        x = generator.standard_normal(shape).astype(F32)
        pads = [int(p) for p in generator.integers(0, 7, 2 * ndim)]
        widths = list(zip(pads[:ndim], pads[ndim:]))
        try:
            expected = np.pad(x, widths, mode=mode)
        except ValueError:  # numpy refuses it too (reflect of a one-cell axis)
            continue
        (result,) = kernel_outputs("Pad", [x, np.array(pads, dtype=I64)], {"mode": mode}, opset=19)
        np.testing.assert_array_equal(result, expected, err_msg=f"{mode} {shape} {pads}")


def test_pad_integers_and_default_value():
    x = rng.integers(-5, 5, size=(2, 3)).astype(np.int32)
    check("Pad", [x, ints(1, 1, 1, 1)], opset=13)
    check("Pad", [x, ints(1, 1, 1, 1), np.array(7, dtype=np.int32)], opset=13)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_2_attribute(mode):
    check("Pad", [normal((3, 4))], {"pads": [1, 0, 2, 1], "mode": mode, "value": 2.0}, opset=2)


def test_pad_1_paddings():
    (result,) = kernel_outputs("Pad", [normal((3, 4))], {"paddings": [1, 0, 2, 1], "value": 2.0}, opset=1)
    assert result.shape == (6, 5) and result[0, 0] == 2.0


# --- DepthToSpace / SpaceToDepth --------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize", [1, 2, 3])
def test_depth_to_space(opset, mode, blocksize):
    if opset < 11 and mode == "CRD":
        return
    x = normal((2, 2 * blocksize * blocksize, 3, 2))
    attributes = {"blocksize": blocksize} if opset < 11 else {"blocksize": blocksize, "mode": mode}
    check("DepthToSpace", [x], attributes, opset=opset)


@pytest.mark.parametrize("opset", [1, 13, 28])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize", [1, 2, 3])
def test_space_to_depth(opset, mode, blocksize):
    if opset < 28 and mode == "CRD":
        return
    x = normal((2, 3, 2 * blocksize, 3 * blocksize))
    attributes = {"blocksize": blocksize} if opset < 28 else {"blocksize": blocksize, "mode": mode}
    check("SpaceToDepth", [x], attributes, opset=opset)


def test_depth_to_space_round_trip():
    x = normal((1, 8, 3, 5))
    for mode in ("DCR", "CRD"):
        (space,) = kernel_outputs("DepthToSpace", [x], {"blocksize": 2, "mode": mode}, opset=13)
        (depth,) = kernel_outputs("SpaceToDepth", [space], {"blocksize": 2, "mode": mode}, opset=28)
        np.testing.assert_array_equal(depth, x)


def test_space_to_depth_matches_onnxruntime():
    check_against_onnxruntime("SpaceToDepth", [normal((1, 2, 4, 6))], {"blocksize": 2}, opset=13)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("layout", ["channels-first", "channels-last"])
def test_constant_pad_of_an_image_matches_numpy(dtype, layout):
    """The constant mode's own path (borders set, data copied in) on a map above the arena's
    floor, its buffer from ``allocate``, for either layout of the input."""
    from lite.ops._layout import empty_channels_last
    from lite.ops.pad import Pad

    x = (rng.standard_normal((2, 8, 40, 40)) * 3).astype(dtype)
    if layout == "channels-last":
        given = empty_channels_last(x.shape, x.dtype)
        given[...] = x
    else:
        given = x
    allocated = []

    def allocate(shape, dtype):
        allocated.append(shape)
        return np.full(shape, 99, dtype)  # stale contents: every cell must be written

    value = np.array(2, dtype)
    got = Pad(given, ints(0, 0, 1, 2, 0, 1, 3, 0), value, allocate=allocate)
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (0, 1), (1, 3), (2, 0)], constant_values=value))
    # Below the arena's floor (the bool map) numpy's own allocator serves.
    assert allocated == ([got.shape] if got.nbytes >= 64 * 1024 else [])
