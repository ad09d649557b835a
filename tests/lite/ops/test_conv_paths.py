"""Conv's shape-specific paths against onnx.reference: Winograd F(2x2, 3x3) on prepared weights,
im2col on a wide grid; and the ``prepare`` hook that gives the kernel its transformed weights."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from lite.ops import _conv_blocks, _conv_gemm, _phase_grid, _wide_im2col, _winograd, conv, fused_activation
from lite.ops.registry import KernelRegistry
from tests.lite.ops._reference import assert_same_across_threads, reference_outputs

rng = np.random.default_rng(31)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def expected_conv(x, w, b, attributes, activation=None):
    y = reference_outputs("Conv", [x, w, b], attributes, 11)[0]
    return y if activation is None else fused_activation.apply(y, *activation)


@pytest.fixture(autouse=True)
def winograd_on_small_layers(monkeypatch):
    """The shapes below are small for speed: let Winograd take them (it declines layers with
    little work, see test_winograd_declines_layers_with_little_work)."""
    monkeypatch.setattr(_winograd, "MIN_WORK", 0)


def test_winograd_declines_layers_with_little_work(monkeypatch):
    monkeypatch.undo()
    w = np.zeros((32, 32, 3, 3), np.float32)
    assert conv.prepare_conv([None, w, None], [(1, 32, 16, 16), w.shape, None], pads=[1, 1, 1, 1]).winograd is None
    w = np.zeros((128, 128, 3, 3), np.float32)
    assert conv.prepare_conv([None, w, None], [(1, 128, 14, 14), w.shape, None], pads=[1, 1, 1, 1]).winograd is not None


WINOGRAD = [
    ((1, 16, 14, 14), 16, [1, 1, 1, 1]),
    ((2, 20, 13, 15), 24, [1, 1, 1, 1]),  # odd sizes: the last tile row and column are cut
    ((1, 17, 16, 14), 32, [0, 2, 1, 0]),  # uneven pads
    ((1, 16, 12, 12), 18, [2, 2, 2, 2]),
]


@pytest.mark.parametrize("x_shape, out_channels, pads", WINOGRAD)
@pytest.mark.parametrize("activation", [None, ("Relu", ()), ("Sigmoid", ())], ids=["none", "Relu", "Sigmoid"])
def test_winograd_matches_the_reference(monkeypatch, x_shape, out_channels, pads, activation):
    calls = []
    monkeypatch.setattr(_winograd, "convolve", _recording(_winograd.convolve, calls))
    x, w, b = normal(*x_shape), normal(out_channels, x_shape[1], 3, 3), normal(out_channels)
    attributes = {"pads": pads}
    prepared = conv.prepare_conv([None, w, b], [x.shape, w.shape, b.shape], **attributes)
    assert prepared is not None and prepared.winograd.shape == (16, out_channels, x_shape[1])
    got = conv.Conv(x, w, b, fused_activation=activation, prepared=prepared, **attributes)
    np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, activation), rtol=1e-4, atol=1e-4)
    assert calls, "the Winograd path should have run"
    # Without the prepared weights the kernel takes the direct path, to the same values.
    np.testing.assert_allclose(conv.Conv(x, w, b, fused_activation=activation, **attributes), got, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "w_shape, attributes, x_shape",
    [
        ((16, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 16, 14, 14)),  # strided
        ((16, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, (1, 16, 14, 14)),  # grouped
        ((8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, (1, 16, 14, 14)),  # too few output channels
        ((16, 16, 5, 5), {"pads": [2, 2, 2, 2]}, (1, 16, 14, 14)),  # 5x5
        ((16, 16, 3, 3), {"pads": [1, 1, 1, 1]}, (1, 16, 7, 7)),  # too small an image
        ((256, 256, 3, 3), {"pads": [1, 1, 1, 1]}, (1, 256, 56, 56)),  # transforms above the budget
    ],
)
def test_weights_are_transformed_only_where_the_path_runs(w_shape, attributes, x_shape):
    w = np.zeros(w_shape, np.float32)
    assert conv.prepare_conv([None, w, None], [x_shape, w_shape, None], **attributes).winograd is None


@pytest.mark.parametrize("attributes", [{"kernel_shape": 3}, {"strides": 1.5}, {"pads": "same"}, {"group": [1]}])
def test_unreadable_attributes_prepare_nothing(attributes):
    """A damaged model loads; the kernel reports the attribute when it runs."""
    w = np.zeros((16, 16, 3, 3), np.float32)
    assert conv.prepare_conv([None, w, None], [(1, 16, 14, 14), w.shape, None], **attributes) is None


def test_weights_computed_at_run_time_are_not_prepared():
    assert conv.prepare_conv([None, None, None], [(1, 16, 14, 14), (16, 16, 3, 3), None]) is None


WIDE = [
    ((1, 3, 60, 60), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((2, 4, 28, 29), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 27, 31), (6, 2, 3, 2), {"group": 2, "strides": [1, 2], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 5, 40, 100), (3, 5, 3, 5), {"strides": [3, 3], "dilations": [1, 2], "pads": [0, 4, 1, 0]}),
]


@pytest.mark.parametrize("x_shape, w_shape, attributes", WIDE)
@pytest.mark.parametrize("columns_bytes", [512, 1 << 20], ids=["row chunks", "whole"])
def test_wide_im2col_matches_the_reference(monkeypatch, x_shape, w_shape, attributes, columns_bytes):
    monkeypatch.setattr(_conv_blocks, "_COLUMNS_BYTES", columns_bytes)
    monkeypatch.setattr(conv, "_GROUPED_COLUMNS_BYTES", 0)  # grouped: the wide path, not one batched GEMM
    monkeypatch.setattr(_conv_gemm, "_WHOLE_COLUMNS_BYTES", 0)  # small images: the wide path, not one copy and GEMM
    calls = []
    monkeypatch.setattr(_wide_im2col, "convolve", _recording(_wide_im2col.convolve, calls))
    x, w, b = normal(*x_shape), normal(*w_shape), normal(w_shape[0])
    got = conv.Conv(x, w, b, fused_activation=("Relu", ()), **attributes)
    np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, ("Relu", ())), rtol=1e-4, atol=1e-4)
    assert calls, "the wide-grid path should have run"


def test_engine_prepares_constant_weights_once():
    weights = np.random.default_rng(8)
    b = GraphBuilder("winograd", opset=13)
    x = b.input("x", np.float32, ["N", 16, 14, 14])
    w = b.constant("w", weights.standard_normal((32, 16, 3, 3)).astype(np.float32))
    b.output(b.node("Conv", [x, w], pads=[1, 1, 1, 1], outputs=["y"]), np.float32, ["N", 32, 14, 14])
    engine = NumpyEngine(load(to_bytes(b.build())))
    (step,) = engine.plans[0].steps
    assert step.prepared is not None and not step.prepared.winograd.flags.writeable
    value = normal(2, 16, 14, 14)
    expected = reference_outputs("Conv", [value, engine.plans[0].constants[engine.plans[0].index_of["w"]]],
                                 {"pads": [1, 1, 1, 1]}, 11)[0]
    np.testing.assert_allclose(engine.run({"x": value})["y"], expected, rtol=1e-4, atol=1e-4)


def test_a_prepare_function_needs_the_prepared_parameter():
    registry = KernelRegistry()
    with pytest.raises(ValueError, match="prepared"):
        registry.register("Thing", prepare=lambda constants, shapes: None)(lambda X: X)


def _recording(function, calls):
    def recorded(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)

    return recorded


def test_threads_share_prepared_weights_and_keep_their_own_scratch():
    """Winograd (prepared weights), depthwise and pointwise paths from several threads at once."""
    import lite

    weights = np.random.default_rng(9)
    b = GraphBuilder("mixed", opset=13)
    x = b.input("x", np.float32, ["N", 16, 16, 16])
    h = b.node("Conv", [x, b.constant("w3", weights.standard_normal((32, 16, 3, 3)).astype(np.float32))],
               pads=[1, 1, 1, 1], fused_activation="Relu")
    h = b.node("Conv", [h, b.constant("dw", weights.standard_normal((32, 1, 3, 3)).astype(np.float32))],
               group=32, pads=[1, 1, 1, 1], strides=[2, 2])
    h = b.node("Conv", [h, b.constant("pw", weights.standard_normal((24, 32, 1, 1)).astype(np.float32))],
               outputs=["y"])
    b.output(h, np.float32, ["N", 24, 8, 8])
    model = lite.Model.load(to_bytes(b.build()), device="numpy")
    assert_same_across_threads(model, [normal(1, 16, 16, 16) for _ in range(6)], repeats=4)


GROUPED = [
    ((1, 128, 4, 4), (128, 8, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),
    ((2, 12, 9, 9), (6, 4, 3, 2), {"group": 3, "pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}),
    ((1, 8, 5, 6, 7), (4, 4, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("x_shape, w_shape, attributes", GROUPED)
@pytest.mark.parametrize("activation", [None, ("Relu", ())], ids=["none", "Relu"])
def test_grouped_convolution_in_one_batched_gemm_matches_the_reference(monkeypatch, x_shape, w_shape, attributes,
                                                                        activation):
    calls = []
    monkeypatch.setattr(_conv_gemm, "_WHOLE_COLUMNS_BYTES", 0)  # 2-D: not the one-copy path (test_conv_layers.py)
    monkeypatch.setattr(_phase_grid, "_COLUMNS_BYTES", 0)  # nor the phase grid's (test_phase_grid.py)
    monkeypatch.setattr(_conv_blocks, "_im2col_grouped", _recording(_conv_blocks._im2col_grouped, calls))
    x, w, b = normal(*x_shape), normal(*w_shape), normal(w_shape[0])
    got = conv.Conv(x, w, b, fused_activation=activation, **attributes)
    assert calls, "expected the batched grouped path"
    np.testing.assert_allclose(got, expected_conv(x, w, b, attributes, activation), rtol=1e-4, atol=1e-4)


def test_depthwise_weights_laid_out_once_per_array_and_never_stale():
    """The channels-last depthwise path remembers each weight array's layout: the same array
    reuses it, a new array (even at a reused address) is laid out afresh."""
    x = normal(1, 192, 6, 6)
    attributes = {"group": 192, "pads": [1, 1, 1, 1]}
    for _ in range(3):
        w, b = normal(192, 1, 3, 3), normal(192)
        for _ in range(2):
            np.testing.assert_allclose(conv.Conv(x, w, b, **attributes), expected_conv(x, w, b, attributes),
                                       rtol=1e-4, atol=1e-4)
        del w


@pytest.mark.parametrize("spatial, pads", [((2, 2), [0, 0, 0, 0]), ((1, 5), [0, 0, 0, 0]), ((1, 1), [0, 0, 0, 0])])
def test_an_input_smaller_than_the_kernel_s_reach_is_refused(spatial, pads):
    """ONNX Runtime refuses it ("Invalid input shape"); an empty output would hide a bad input."""
    from lite.errors import KernelError
    from lite.ops.conv import Conv

    x = np.ones((1, 2, *spatial), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(KernelError, match=r"smaller than the kernel's reach \[3, 3\]"):
        Conv(x, w, pads=pads)


def test_an_input_and_weight_that_do_not_match_are_a_kernel_error():
    from lite.errors import KernelError
    from lite.ops.conv import Conv

    with pytest.raises(KernelError, match="do not match for group=1"):
        Conv(np.ones((1, 4, 8, 8), np.float32), np.ones((3, 2, 3, 3), np.float32))
