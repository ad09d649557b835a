"""The int8 scheme (TFLite quantization spec), the streaming histogram and the calibration methods."""

from __future__ import annotations

import numpy as np
import pytest

from converter.quantize.config import QuantConfig
from converter.quantize.errors import QuantizationOptionError
from converter.quantize.histogram import StreamingHistogram
from converter.quantize.methods import METHODS, TensorStats
from converter.quantize.scheme import activation_params, quantize_bias, quantize_weight


def test_activation_params_are_asymmetric_uint8_and_represent_zero_exactly():
    params = activation_params(-1.0, 3.0)
    assert params.axis is None and not params.signed and not params.symmetric
    assert params.scale[0] == pytest.approx(4.0 / 255.0)
    zero = int(params.zero_point[0])
    assert 0 <= zero <= 255 and zero == round(1.0 / params.scale[0])  # real 0.0 is the integer zero point
    relu = activation_params(0.5, 6.0)  # the range is widened to contain 0
    assert relu.zero_point[0] == 0 and relu.scale[0] == pytest.approx(6.0 / 255.0)
    signed = activation_params(-1.0, 3.0, "int8")
    assert signed.signed and -128 <= signed.zero_point[0] <= 127


def test_weights_are_symmetric_narrow_range_per_output_channel():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * np.arange(1, 9)[:, None, None, None]
    weight[3] = 0.0
    values, params = quantize_weight(weight, 0)
    assert values.dtype == np.int8 and values.min() >= -127 and values.max() <= 127
    assert params.axis == 0 and params.symmetric and params.scale.shape == (8,) and not params.zero_point.any()
    assert params.scale[3] == 1.0  # an all-zero channel still gets a positive scale
    restored = values * params.scale[:, None, None, None]
    assert np.max(np.abs(restored - weight)) <= params.scale.max() / 2 + 1e-6


def test_bias_is_int32_with_input_scale_times_weight_scale():
    values, params = quantize_bias(np.array([0.5, -0.25], np.float32), 0.02, np.array([0.01, 0.03], np.float32))
    assert values.dtype == np.int32 and params.bits == 32 and params.axis == 0
    np.testing.assert_allclose(params.scale, [0.0002, 0.0006], rtol=1e-6)
    np.testing.assert_array_equal(values, [2500, -417])


def test_bias_of_per_tensor_weights_is_per_tensor():
    """Below opset 13 weights are per tensor and DequantizeLinear has no axis: the bias follows."""
    values, params = quantize_bias(np.array([0.5, -0.25, 0.1], np.float32), 0.02, np.array([0.01], np.float32))
    assert params.axis is None and params.scale.shape == (1,)
    np.testing.assert_array_equal(values, [2500, -1250, 500])


def test_histogram_is_independent_of_batching():
    rng = np.random.default_rng(1)
    data = np.concatenate([rng.standard_normal(5000), 50.0 * rng.standard_normal(10)])
    whole, pieces = StreamingHistogram(max_bins=512), StreamingHistogram(max_bins=512)
    whole.add(data)
    for chunk in np.array_split(data, 17):
        pieces.add(chunk)
    assert whole.total == pieces.total == data.size
    assert pieces.counts.size <= 512
    assert pieces.edges()[0] <= data.min() and pieces.edges()[-1] >= data.max()


def test_percentile_and_entropy_clip_outliers_that_minmax_keeps():
    rng = np.random.default_rng(2)
    stats = TensorStats(histogram=StreamingHistogram())
    for _ in range(4):
        stats.add(np.abs(rng.standard_normal(20000)).astype(np.float32))
    stats.add(np.array([100.0], np.float32))
    config = QuantConfig(calibration_method="percentile", percentile=99.9)
    assert METHODS["minmax"](stats, config)[1] == 100.0
    assert 2.5 < METHODS["percentile"](stats, config)[1] < 5.0
    entropy_high = METHODS["entropy"](stats, config)[1]
    assert 1.0 < entropy_high < 100.0


def test_config_rejects_unknown_mode_with_the_choices():
    with pytest.raises(QuantizationOptionError, match="int8-dynamic"):
        QuantConfig(mode="int4")
