"""Normalization kernels against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_onnxruntime, check_against_reference, kernel_outputs

rng = np.random.default_rng(7)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def batch_norm_inputs(shape):
    channels = shape[1]
    return [
        normal(*shape),
        normal(channels),
        normal(channels),
        normal(channels),
        rng.uniform(0.5, 2.0, channels).astype(np.float32),
    ]


@pytest.mark.parametrize("opset", [14, 15])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3), (1, 4, 3, 2, 2)])
def test_batch_normalization_inference(opset, shape):
    check_against_reference("BatchNormalization", batch_norm_inputs(shape), {"epsilon": 1e-3}, opset=opset)


@pytest.mark.parametrize("opset", [7, 9])
def test_batch_normalization_inference_before_14(opset):
    # onnx.reference treats opsets 6-13 as training when momentum is set; inference engines
    # (ONNX Runtime, this one) use the stored statistics.
    check_against_onnxruntime("BatchNormalization", batch_norm_inputs((2, 3, 4, 5)), {"epsilon": 1e-3}, opset=opset)


def test_batch_normalization_6_is_test():
    check_against_reference(
        "BatchNormalization", batch_norm_inputs((2, 3, 4, 5)), {"is_test": 1, "epsilon": 1e-3}, opset=6
    )


def test_batch_normalization_training_mode():
    check_against_reference(
        "BatchNormalization",
        batch_norm_inputs((3, 4, 5, 2)),
        {"training_mode": 1, "momentum": 0.8},
        opset=15,
        output_count=3,
    )


def test_batch_normalization_spatial_0_is_per_activation():
    x = normal(2, 3, 4)
    params = [normal(3, 4), normal(3, 4), normal(3, 4), rng.uniform(0.5, 2, (3, 4)).astype(np.float32)]
    from lite.ops import KERNELS

    y = KERNELS.select("BatchNormalization", "", 7).fn(x, *params, spatial=0)
    expected = (x - params[2]) / np.sqrt(params[3] + 1e-5) * params[0] + params[1]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 96, 4, 4), (2, 3, 7), (1, 2, 3, 2, 2)])
def test_instance_normalization(shape):
    channels = shape[1]
    check_against_reference(
        "InstanceNormalization", [normal(*shape), normal(channels), normal(channels)], {"epsilon": 1e-4}, opset=6
    )


@pytest.mark.parametrize("axis", [-1, 1, 2])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization(axis, with_bias):
    shape = (2, 3, 4, 5)
    normalized = shape[axis:] if axis >= 0 else shape[axis:]
    bias = normal(*normalized) if with_bias else None
    check_against_reference(
        "LayerNormalization",
        [normal(*shape), normal(*normalized), bias],
        {"axis": axis},
        opset=17,
        output_count=3,
    )


@pytest.mark.parametrize("shape", [(2, 16, 64), (3, 5, 128), (2, 7, 300)], ids=["16x64", "width 128", "width 300"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization_with_only_its_first_output(shape, with_bias):
    """A node declaring Y alone (the engine passes its output count)."""
    x, scale = normal(*shape) * 3 + 1, normal(shape[-1])
    bias = normal(shape[-1]) if with_bias else None
    (got,) = kernel_outputs("LayerNormalization", [x, scale, bias], {}, opset=17, output_count=1)
    (expected, _, _) = kernel_outputs("LayerNormalization", [x, scale, bias], {}, opset=17, output_count=3)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    check_against_reference("LayerNormalization", [x, scale, bias], {}, opset=17)


def test_layer_normalization_of_a_transposed_input():
    """wav2vec2 normalizes a transposed convolution output: rows of a strided array."""
    x, scale, bias = normal(2, 32, 9).transpose(0, 2, 1), normal(32), normal(32)
    assert not x.flags.c_contiguous
    got = kernel_outputs("LayerNormalization", [x, scale, bias], {}, opset=17, output_count=3)
    expected = kernel_outputs("LayerNormalization", [np.ascontiguousarray(x), scale, bias], {}, opset=17,
                              output_count=3)
    for value, reference in zip(got, expected):
        np.testing.assert_array_equal(value, reference)
    check_against_reference("LayerNormalization", [np.ascontiguousarray(x), scale, bias], {}, opset=17,
                            output_count=3)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(opset):
    groups = 2
    channels = 4
    per = groups if opset == 18 else channels
    check_against_reference(
        "GroupNormalization",
        [normal(2, channels, 3, 3), normal(per), normal(per)],
        {"num_groups": groups, "epsilon": 1e-3},
        opset=opset,
    )


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 1])
def test_lp_normalization(p, axis):
    # onnx.reference's L1 norm sums the signed values; ONNX Runtime sums absolute values.
    check = check_against_onnxruntime if p == 1 else check_against_reference
    check("LpNormalization", [normal(2, 3, 4)], {"p": p, "axis": axis}, opset=1)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size):
    # onnx.reference loops over the batch axis instead of channels; ONNX Runtime is the oracle.
    check_against_onnxruntime(
        "LRN", [normal(2, 6, 3, 3)], {"size": size, "alpha": 1e-2, "beta": 0.7, "bias": 1.5}, opset=13
    )


def test_lrn_even_size_window_leans_forward():
    # ONNX Runtime rejects even sizes; the spec's window is [c - floor((s-1)/2), c + ceil((s-1)/2)].
    x = normal(1, 5, 2, 2)
    (y,) = kernel_outputs("LRN", [x], {"size": 2, "alpha": 0.1, "beta": 0.5, "bias": 2.0}, opset=13)
    squares = x**2
    window = squares + np.concatenate([squares[:, 1:], np.zeros_like(squares[:, :1])], axis=1)
    np.testing.assert_allclose(y, x / (2.0 + 0.05 * window) ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("axes", [None, [1], [0, 2, 3]])
def test_mean_variance_normalization(axes):
    attributes = {} if axes is None else {"axes": axes}
    check_against_reference("MeanVarianceNormalization", [normal(2, 3, 4, 5)], attributes, opset=13, atol=1e-4)


@pytest.mark.parametrize("scale_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("contiguous", [True, False])
def test_layer_normalization_over_the_last_axis_in_few_calls(scale_dtype, contiguous):
    """Y alone of a C-contiguous float32 input over its last axis, with float32 Scale and B,
    takes normalize_last_axis; a strided input or a float64 Scale the general path: the same
    values either way."""
    x = normal(2, 9, 64) * 3 + 1 if contiguous else (normal(2, 64, 9) * 3 + 1).transpose(0, 2, 1)
    scale, bias = normal(64).astype(scale_dtype), normal(64).astype(scale_dtype)
    (got,) = kernel_outputs("LayerNormalization", [x, scale, bias], {}, opset=17, output_count=1)
    wide = x.astype(np.float64)
    expected = (wide - wide.mean(-1, keepdims=True)) / np.sqrt(wide.var(-1, keepdims=True) + 1e-5) * scale + bias
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    from lite.ops.layer_normalization import normalize_last_axis

    assert (normalize_last_axis(np.ascontiguousarray(x), scale, bias, 1e-5) is None) == (scale_dtype != np.float32)
