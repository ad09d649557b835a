"""Models built with spox (a Python ONNX graph builder other teams write models with), converted
with default options and run on both CPU engines against ONNX Runtime on the original.

spox writes what its users write: graphs at the newest opsets (21 here), constants as Constant
nodes rather than initializers, value names of its own making, and preprocessing inside the graph
(uint8 images cast, scaled and transposed; index arithmetic on shapes). Each model has a symbolic
batch and is fed two batch sizes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.zoo.wheels import relative_error

spox = pytest.importorskip("spox", reason="spox builds these models (the dev extra installs it)")
ort = pytest.importorskip("onnxruntime")
converter = pytest.importorskip("converter")
lite = pytest.importorskip("lite")

import spox.opset.ai.onnx.v21 as op  # noqa: E402
from spox import Tensor, argument, build  # noqa: E402

RNG = np.random.default_rng(7)


def _weights(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def image_classifier() -> tuple[onnx.ModelProto, dict]:
    """NHWC uint8 pictures in, class index and probabilities out, preprocessing in the graph."""
    image = argument(Tensor(np.uint8, ("batch", 32, 32, 3)))
    x = op.div(op.cast(image, to=np.float32), op.const(np.float32(255.0)))
    x = op.div(op.sub(x, op.const(np.array([0.485, 0.456, 0.406], np.float32))),
               op.const(np.array([0.229, 0.224, 0.225], np.float32)))
    x = op.transpose(x, perm=[0, 3, 1, 2])
    x = op.conv(x, op.const(_weights(16, 3, 3, 3)), op.const(_weights(16)), pads=[1, 1, 1, 1], strides=[2, 2])
    # A per-channel scale and shift (spox 0.18's BatchNormalization declares three outputs, which
    # ONNX's inference refuses outside training).
    x = op.add(op.mul(x, op.const(RNG.uniform(0.5, 1.5, (1, 16, 1, 1)).astype(np.float32))),
               op.const(_weights(1, 16, 1, 1)))
    x = op.relu(x)
    x = op.conv(x, op.const(_weights(16, 1, 3, 3)), pads=[1, 1, 1, 1], group=16)  # depthwise
    x = op.hard_swish(x)
    x = op.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])[0]
    x = op.flatten(op.global_average_pool(x))
    logits = op.gemm(x, op.const(_weights(10, 16)), op.const(_weights(10)), transB=1)
    probabilities = op.softmax(logits, axis=-1)
    label = op.arg_max(logits, axis=1, keepdims=0)
    model = build(inputs={"image": image}, outputs={"probabilities": probabilities, "label": label})
    return model, {"image": lambda n: RNG.integers(0, 256, (n, 32, 32, 3)).astype(np.uint8)}


def text_encoder() -> tuple[onnx.ModelProto, dict]:
    """Token ids and a padding mask in; a masked mean of embeddings, a LayerNorm and a projection."""
    ids = argument(Tensor(np.int64, ("batch", "tokens")))
    mask = argument(Tensor(np.int64, ("batch", "tokens")))
    table = op.const(_weights(50, 24))
    embedded = op.gather(table, ids)  # [batch, tokens, 24]
    weights = op.unsqueeze(op.cast(mask, to=np.float32), op.const(np.array([2], np.int64)))
    summed = op.reduce_sum(op.mul(embedded, weights), op.const(np.array([1], np.int64)), keepdims=0)
    count = op.clip(op.reduce_sum(weights, op.const(np.array([1], np.int64)), keepdims=0), op.const(np.float32(1.0)))
    pooled = op.div(summed, count)
    normed = op.layer_normalization(pooled, op.const(np.ones(24, np.float32)), op.const(np.zeros(24, np.float32)))[0]
    hidden = op.tanh(op.add(op.matmul(normed, op.const(_weights(24, 16))), op.const(_weights(16))))
    model = build(inputs={"ids": ids, "mask": mask}, outputs={"embedding": hidden})

    def mask_of(n: int) -> np.ndarray:
        lengths = RNG.integers(1, 13, n)
        return (np.arange(12)[None, :] < lengths[:, None]).astype(np.int64)

    return model, {"ids": lambda n: RNG.integers(0, 50, (n, 12)).astype(np.int64), "mask": mask_of}


def sequence_head() -> tuple[onnx.ModelProto, dict]:
    """A 1-D convolution over a signal, shapes computed in the graph (Shape, Slice, Concat,
    Reshape), a gated activation (Sigmoid x Tanh), Where on a threshold and a cumulative sum."""
    signal = argument(Tensor(np.float32, ("batch", 4, 64)))
    x = op.conv(signal, op.const(_weights(8, 4, 5)), op.const(_weights(8)), pads=[2, 2])
    gate, value = op.split(x, axis=1, num_outputs=2)
    x = op.mul(op.sigmoid(gate), op.tanh(value))  # [batch, 4, 64]
    batch = op.slice(op.shape(x), op.const(np.array([0], np.int64)), op.const(np.array([1], np.int64)))
    x = op.reshape(x, op.concat([batch, op.const(np.array([-1], np.int64))], axis=0))  # [batch, 256]
    x = op.where(op.greater(x, op.const(np.float32(0.1))), x, op.const(np.float32(0.0)))
    x = op.cum_sum(x, op.const(np.array(1, np.int64)))
    model = build(inputs={"signal": signal}, outputs={"features": x})
    return model, {"signal": lambda n: RNG.standard_normal((n, 4, 64)).astype(np.float32)}


MODELS = {"image_classifier": image_classifier, "text_encoder": text_encoder, "sequence_head": sequence_head}


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request, tmp_path_factory):
    model, makers = MODELS[request.param]()
    assert any(node.op_type == "Constant" for node in model.graph.node)  # spox's way with weights
    folder = tmp_path_factory.mktemp(request.param)
    original = folder / "model.onnx"
    onnx.save(model, original)
    report = converter.convert(original, folder / "model.lite")  # default options, nothing else
    assert report.verification is not None and report.verification.passed, report.verification
    return original, folder / "model.lite", makers


@pytest.mark.parametrize(("device", "rtol"), [("numpy", 1e-3), ("cpu", 1e-4)])
@pytest.mark.parametrize("batch", [1, 3])
def test_spox_model_matches_onnxruntime(built, device, rtol, batch):
    original, converted, makers = built
    feeds = {name: make(batch) for name, make in makers.items()}
    session = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    got = lite.Model.load(converted, device=device).predict(feeds)
    assert set(got) == set(expected)
    for name, want in expected.items():
        have = np.asarray(got[name])
        assert have.shape == want.shape and have.dtype == want.dtype, name
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(have, want, err_msg=name)
        else:
            assert relative_error(have, want) <= rtol, (name, relative_error(have, want))
