"""The squeeze-and-excitation block (lite.ops._squeeze_excite) against its formula in float64,
for each pair of activations it treats apart (SiLU and Sigmoid from halved weights)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import fused_activation
from lite.ops._layout import empty_channels_last
from lite.ops._squeeze_excite import SqueezeExcite

rng = np.random.default_rng(51)


def expected(x, w1, b1, act1, w2, b2, act2):
    """``x * act2(W2 @ act1(W1 @ mean(x) + b1) + b2)`` in float64."""
    means = x.astype(np.float64).mean(axis=(2, 3))
    hidden = fused_activation.apply(means @ w1.T.astype(np.float64) + b1, *act1)
    gate = fused_activation.apply(hidden @ w2.T.astype(np.float64) + b2, *act2)
    return x * gate[:, :, None, None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act1, act2", [
    (("Silu", ()), ("Sigmoid", ())),
    (("Relu", ()), ("Sigmoid", ())),
    (("Relu", ()), ("HardSigmoid", (1 / 6, 0.5))),
    (("Silu", ()), ("HardSigmoid", (0.2, 0.5))),
])
def test_the_block_matches_its_formula(act1, act2, dtype):
    x = rng.standard_normal((2, 24, 5, 5)).astype(dtype) * 3
    w1, b1 = rng.standard_normal((6, 24)).astype(dtype), rng.standard_normal(6).astype(dtype)
    w2, b2 = rng.standard_normal((24, 6)).astype(dtype), rng.standard_normal(24).astype(dtype)
    block = SqueezeExcite(w1, b1, act1, w2, b2, act2, fallback=None)
    want = expected(x, w1, b1, act1, w2, b2, act2)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(block(x), want, rtol=tolerance, atol=tolerance)
    last = empty_channels_last(x.shape, x.dtype)
    last[...] = x
    np.testing.assert_allclose(block(last), want, rtol=tolerance, atol=tolerance)


def test_float16_block_computes_in_float32_and_rounds_once():
    # In float16, 1/(H*W) alone was off by a fraction of a step and every product and sum of the
    # gate rounded: the output moved several float16 steps from the formula.
    act1, act2 = ("Relu", ()), ("HardSigmoid", (1 / 6, 0.5))
    x = (rng.standard_normal((1, 96, 14, 14)) * 3).astype(np.float16)
    w1, b1, w2, b2 = (rng.standard_normal(shape).astype(np.float16) for shape in ((24, 96), (24,), (96, 24), (96,)))
    got = SqueezeExcite(w1, b1, act1, w2, b2, act2, fallback=None)(x)
    want = expected(x, w1, b1, act1, w2, b2, act2)
    assert got.dtype == np.float16
    steps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float16))
    assert steps.max() <= 1.0
