"""Signal and grid kernels against onnx.reference: DFT, STFT, window functions, MelWeightMatrix,
CumProd, BitCast, MaxUnpool, AffineGrid."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._checks_domains import check, normal, rng, run_kernel


@pytest.mark.parametrize("inverse,onesided,channels", [(0, 0, 1), (0, 0, 2), (0, 1, 1), (1, 0, 2), (1, 1, 2)])
@pytest.mark.parametrize("dft_length", [None, 6, 12])
def test_dft_20(inverse, onesided, channels, dft_length):
    inputs = [normal(2, 8, 3, channels), None if dft_length is None else np.array(dft_length, dtype=np.int64),
              np.array(1, dtype=np.int64)]
    check("DFT", inputs, {"inverse": inverse, "onesided": onesided}, opset=20, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axis", [1, 2, -2])
def test_dft_17_axis_attribute(axis):
    check("DFT", [normal(2, 6, 5, 2)], {"axis": axis}, opset=17, rtol=1e-4, atol=1e-4)


def test_dft_20_default_axis_is_last_signal_axis():
    check("DFT", [normal(2, 6, 5, 1)], {}, opset=20, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("with_window,with_length,onesided", [(False, True, 1), (True, False, 1), (True, True, 0)])
def test_stft(with_window, with_length, onesided):
    signal = normal(2, 40, 1)
    inputs = [signal, np.array(6, dtype=np.int64), normal(16) if with_window else None,
              np.array(16, dtype=np.int64) if with_length else None]
    check("STFT", inputs, {"onesided": onesided}, opset=17, rtol=1e-4, atol=1e-4)


def test_stft_of_a_signal_without_its_trailing_axis_is_real():
    # (batch, length), as ONNX Runtime accepts it and onnxscript's spectrogram front ends write it.
    signal = normal(2, 40, 1)
    step, window = np.array(6, dtype=np.int64), normal(16)
    (whole,) = check("STFT", [signal, step, window, None], {"onesided": 1}, opset=17, rtol=1e-4, atol=1e-4)
    (bare,) = run_kernel("STFT", [signal[..., 0], step, window, None], {"onesided": 1}, opset=17)
    np.testing.assert_array_equal(bare, whole)


@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("output_datatype", [1, 11])
def test_windows(op_type, periodic, output_datatype):
    check(op_type, [np.array(10, dtype=np.int32)], {"periodic": periodic, "output_datatype": output_datatype},
          opset=17)


@pytest.mark.parametrize("bands,length,rate,lower,upper", [(8, 16, 8192, 0.0, 4096.0), (5, 64, 16000, 300.0, 6000.0)])
def test_mel_weight_matrix(bands, length, rate, lower, upper):
    inputs = [np.array(v, dtype=np.int64) for v in (bands, length, rate)]
    inputs += [np.array(lower, dtype=np.float32), np.array(upper, dtype=np.float32)]
    check("MelWeightMatrix", inputs, {}, opset=17)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cum_prod(dtype, exclusive, reverse, axis):
    x = rng.integers(1, 4, (3, 4)).astype(dtype)
    check("CumProd", [x, np.array(axis, dtype=np.int64)], {"exclusive": exclusive, "reverse": reverse}, opset=26)


@pytest.mark.parametrize("source,to", [(np.float32, 6), (np.int64, 11), (np.uint16, 5), (np.int8, 2),
                                       (np.float16, 4), (np.float64, 13)])
def test_bit_cast(source, to):
    x = rng.integers(0, 120, (2, 3)).astype(source)
    check("BitCast", [x], {"to": to}, opset=26)


def test_bit_cast_keeps_scalars_and_rejects_width_mismatch():
    from lite.errors import KernelError

    (y,) = run_kernel("BitCast", [np.array(1.0, dtype=np.float32)], {"to": 6}, opset=26)
    assert y.shape == () and int(y) == 0x3F800000
    with pytest.raises(KernelError, match="widths must match"):
        run_kernel("BitCast", [np.zeros(2, np.float32)], {"to": 7}, opset=26)


def test_max_unpool_inverts_max_pool():
    x = normal(1, 2, 4, 4)
    pooled, indices = check("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=12, output_count=2)
    check("MaxUnpool", [pooled, indices], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=22)
    check("MaxUnpool", [pooled, indices, np.array([1, 2, 5, 5], dtype=np.int64)],
          {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=22)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2), (1, 1, 1, 3)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid(size, align_corners):
    spatial = len(size) - 2
    if size[2:] == (1, 3) and align_corners:
        pytest.skip("onnx.reference divides by zero for a size-1 axis with align_corners=1")
    theta = normal(size[0], spatial, spatial + 1)
    check("AffineGrid", [theta, np.array(size, dtype=np.int64)], {"align_corners": align_corners}, opset=20)
