"""The CUDA engine: device-resident inputs and outputs, CUDA graphs, fp16 compute (skips without a GPU)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes

ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime-gpu")
if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip("needs onnxruntime-gpu and a CUDA GPU", allow_module_level=True)
torch = pytest.importorskip("torch", reason="device arrays are made with PyTorch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

pytestmark = pytest.mark.gpu


def cnn(weights_dtype=np.float32) -> bytes:
    rng = np.random.default_rng(0)
    b = GraphBuilder("cnn", opset=17)
    x = b.input("x", np.float32, ["N", 3, 16, 16])
    w = b.constant("w1", rng.standard_normal((8, 3, 3, 3)).astype(weights_dtype))
    if weights_dtype != np.float32:
        w = b.node("Cast", [w], to=1)
    y = b.node("Conv", [x, w, b.constant("b1", np.zeros(8, np.float32))], pads=[1, 1, 1, 1],
               fused_activation="Clip", fused_activation_params=[0.0, 6.0])
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y], outputs=["features"])
    b.output(y, np.float32, ["N", 8])
    return to_bytes(b.build())


def test_device_inputs_give_device_outputs_that_torch_imports():
    data = cnn()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    reference = lite.Model.load(data, device="numpy")(x.cpu().numpy())
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    out = model.predict({"x": x})["features"]
    assert isinstance(out, lite.DeviceArray) and out.device == "cuda:0" and out.shape == (4, 8)
    np.testing.assert_allclose(torch.from_dlpack(out).cpu().numpy(), reference, rtol=1e-3, atol=1e-4)


def test_numpy_inputs_give_numpy_outputs():
    data = cnn()
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    out = model(x)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, lite.Model.load(data, device="numpy")(x), rtol=1e-3, atol=1e-4)


def test_cuda_graph_buckets_per_input_shape():
    model = lite.Model.load(cnn(), device="cuda", cache_dir=None)
    assert model.engine.gpu is not None and model.engine.gpu.graphed is not None, model.engine.cuda_graph_declined
    for batch in (1, 3, 1, 3):
        x = torch.randn(batch, 3, 16, 16, device="cuda")
        expected = lite.Model.load(cnn(), device="numpy")(x.cpu().numpy())
        got = torch.from_dlpack(model.predict({"x": x})["features"]).cpu().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
    assert len(model.engine.gpu.buckets) == 2


def test_fp16_weights_compute_in_half_precision_on_the_gpu():
    data = cnn(np.float16)
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    assert model.engine.compute_precision == "fp16"
    x = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    out = model(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, lite.Model.load(data, device="numpy")(x), rtol=2e-2, atol=2e-2)


def test_custom_op_partition_on_cuda():
    ops = lite.CustomOps()

    @ops.python("Scale", domain="com.example")
    def scale(x, *, factor=1.0):
        return x * np.float32(factor)

    b = GraphBuilder("mixed", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    h = b.node("Gemm", [x, b.constant("w", np.eye(4, dtype=np.float32))])
    h = b.node("Scale", [h], domain="com.example", factor=2.0)
    y = b.node("Relu", [h], outputs=["y"])
    b.output(y, np.float32, ["N", 4])
    model_ir = b.build()
    model_ir.opset_imports["com.example"] = 1
    model = lite.Model.load(to_bytes(model_ir), device="cuda", custom_ops=ops, cache_dir=None)
    x = np.array([[1, -1, 2, -2]], np.float32)
    np.testing.assert_allclose(model(x), [[2, 0, 4, 0]])
    xt = torch.tensor(x, device="cuda")
    np.testing.assert_allclose(np.asarray(model(xt)), [[2, 0, 4, 0]])


def test_pytorch_calls_are_asynchronous_and_ordered_by_streams():
    """With PyTorch loaded first, the graphed session runs on a PyTorch stream and calls with
    PyTorch tensors return before the GPU is done: many calls queued back to back, on the default
    and on a side stream, each input freed right away, must each give their own result; numpy
    and CuPy-style (DLPack) calls in between stay synchronous and agree too."""
    data = cnn()
    reference = lite.Model.load(data, device="numpy")
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    assert model.engine.gpu.stream is not None, "the graphed session should run on a PyTorch stream"
    inputs = [torch.randn(4, 3, 16, 16, device="cuda") * (k + 1) for k in range(24)]
    expected = [reference(x.cpu().numpy()) for x in inputs]
    side = torch.cuda.Stream()
    outputs = []
    for k, x in enumerate(inputs):
        if k % 3 == 2:
            with torch.cuda.stream(side):
                side.wait_stream(torch.cuda.current_stream())
                outputs.append(torch.from_dlpack(model.predict({"x": x.clone()})["features"]) * 1)
            torch.cuda.current_stream().wait_stream(side)
        else:
            outputs.append(torch.from_dlpack(model.predict({"x": x.clone()})["features"]))
        if k % 5 == 4:  # a synchronous numpy call in the middle of the queue
            np.testing.assert_allclose(model(x.cpu().numpy()), expected[k], rtol=1e-3, atol=1e-4)
        if k % 7 == 6:  # and one through the generic DLPack path
            got = model.predict({"x": lite.DeviceArray(x)})["features"]
            np.testing.assert_allclose(got.numpy(), expected[k], rtol=1e-3, atol=1e-4)
    torch.cuda.synchronize()
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-3, atol=1e-4)


def test_repeated_pytorch_calls_take_the_fast_path_and_follow_shape_changes():
    """A PyTorch call of the last call's shapes goes straight to that graph's replay; a call of
    other shapes, or of another dtype, takes the full path (and its own bucket) and still answers
    right; inputs overwritten in place right after each call do not change earlier answers."""
    data = cnn()
    reference = lite.Model.load(data, device="numpy")
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    runner = model.engine.gpu
    outputs, expected = [], []
    for k, batch in enumerate([2, 2, 2, 5, 5, 2, 1, 2]):
        x = torch.randn(batch, 3, 16, 16, device="cuda")
        outputs.append(torch.from_dlpack(model.predict({"x": x})["features"]))
        expected.append(reference(x.cpu().numpy()))
        x.mul_(-3)  # queued after the call on the same stream: the call must have read x already
        if k == 1:
            assert runner.fast is not None and runner.fast.torch.signature[0][1] == (2, 3, 16, 16)
    assert runner.fast.torch.signature[0][1] == (2, 3, 16, 16)
    wide = torch.randn(2, 3, 16, 16, device="cuda", dtype=torch.float64)
    assert not runner.fast.torch.matches({"x": wide})  # another dtype: never copied (converted) silently
    torch.cuda.synchronize()
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-3, atol=1e-4)


def test_numpy_inputs_in_pinned_memory():
    data = cnn()
    x = lite.pinned_empty((4, 3, 16, 16), np.float32)
    x[:] = np.random.default_rng(3).standard_normal(x.shape)
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    np.testing.assert_allclose(model(x), lite.Model.load(data, device="numpy")(x), rtol=1e-3, atol=1e-4)


def deep_cnn() -> bytes:
    """Eight 3x3 convolutions of 64 channels: enough activation memory that graphs captured by
    different threads would share arena bytes (ResNet-50 crashed that way in a server)."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("deep", opset=17)
    y = b.input("x", np.float32, ["N", 3, 64, 64])
    channels = 3
    for k in range(8):
        w = b.constant(f"w{k}", (rng.standard_normal((64, channels, 3, 3)) * 0.1).astype(np.float32))
        y = b.node("Conv", [y, w, b.constant(f"b{k}", np.zeros(64, np.float32))], pads=[1, 1, 1, 1],
                   fused_activation="Relu")
        channels = 64
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y], outputs=["features"])
    b.output(y, np.float32, ["N", 64])
    return to_bytes(b.build())


def test_threads_with_many_batch_sizes_agree_with_the_numpy_engine():
    """Several threads calling one model with many batch sizes (more than the graph buckets),
    numpy inputs, some of them not aligned: every answer right, no CUDA error."""
    from concurrent.futures import ThreadPoolExecutor

    data = deep_cnn()
    reference = lite.Model.load(data, device="numpy")
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    sizes = [1, 3, 16, 7, 8, 13, 32, 5, 2, 24, 9, 1, 16, 11, 3] * 2

    def call(batch):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 64, 64)).astype(np.float32)
        if batch % 2:  # a view one byte into a buffer, as a decoded request can be
            x = np.frombuffer(b"\0" + x.tobytes(), np.float32, offset=1).reshape(x.shape)
        return x, model(x)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(call, sizes))
    for x, got in results:
        np.testing.assert_allclose(got, reference(np.ascontiguousarray(x)), rtol=1e-3, atol=1e-3)
    runner = model.engine.gpu
    assert runner.worker is not None and runner.session_thread != threading.get_ident(), "a worker runs the calls"
    assert runner.buckets, "the worker replays captured graphs"


def test_threads_passing_pytorch_tensors_get_graph_replays_in_order():
    """Once another thread calls, the runner's worker thread runs (and replays the graphs for)
    every caller, the loading thread included; calls with PyTorch tensors stay ordered on each
    caller's own stream."""
    from concurrent.futures import ThreadPoolExecutor

    data = deep_cnn()
    reference = lite.Model.load(data, device="numpy")
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    np.testing.assert_allclose(model(np.ones((2, 3, 64, 64), np.float32)),  # inline, on this thread
                               reference(np.ones((2, 3, 64, 64), np.float32)), rtol=1e-3, atol=1e-3)

    def call(k):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            x = torch.randn(2 + k % 3, 3, 64, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(k))
            outputs = [torch.from_dlpack(model.predict({"x": x * (j + 1)})["features"]) for j in range(4)]
        stream.synchronize()
        return x.cpu().numpy(), [y.cpu().numpy() for y in outputs]

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(call, range(9)))
    for x, outputs in results:
        for j, got in enumerate(outputs):
            np.testing.assert_allclose(got, reference(x * (j + 1)), rtol=1e-3, atol=1e-3)
    assert model.engine.gpu.worker is not None and len(model.engine.gpu.buckets) == 3
    np.testing.assert_allclose(model(np.ones((2, 3, 64, 64), np.float32)),  # through the worker now
                               reference(np.ones((2, 3, 64, 64), np.float32)), rtol=1e-3, atol=1e-3)


def test_a_bound_run_replays_the_graph_on_the_callers_buffers():
    """``Model.bind`` on CUDA: the inputs are the graph's own buffers (PyTorch views), a run is the
    replay queued after the caller's stream (a late write into the buffer is still seen), the
    outputs are the same buffers every run, and predict's buckets never touch them."""
    data = cnn()
    reference = lite.Model.load(data, device="numpy")
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    binding = model.bind({"x": torch.randn(2, 3, 16, 16, device="cuda")})
    assert type(binding).__name__ == "GraphBinding" and isinstance(binding.inputs["x"], torch.Tensor)
    out = binding.outputs["features"]
    for k in range(4):
        x = torch.randn(2, 3, 16, 16, device="cuda") * (k + 1)
        torch.cuda._sleep(20_000_000)  # the write below lands long after run() has returned
        binding.inputs["x"].copy_(x)
        result = binding.run()["features"]
        assert result is out
        model.predict({"x": torch.randn(2, 3, 16, 16, device="cuda")})  # other buffers, same shapes
        np.testing.assert_allclose(result.cpu().numpy(), reference(x.cpu().numpy()), rtol=1e-3, atol=1e-4)
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    binding.inputs["x"] = x  # assigned, not written: copied into the buffer, which goes back
    np.testing.assert_allclose(binding.run()["features"].cpu().numpy(), reference(x), rtol=1e-3, atol=1e-4)
    assert binding.inputs["x"].is_cuda
    binding.inputs["x"] = torch.zeros(3, 3, 16, 16, device="cuda")
    with pytest.raises(lite.InvalidInputError, match=r"bound input 'x' is now float32\[3, 3, 16, 16\]"):
        binding.run()


def test_a_bound_run_after_another_thread_called_goes_through_the_worker():
    data = cnn()
    reference = lite.Model.load(data, device="numpy")
    model = lite.Model.load(data, device="cuda", cache_dir=None)
    binding = model.bind({"x": torch.zeros(1, 3, 16, 16, device="cuda")})
    thread = threading.Thread(target=model.predict, args=({"x": np.ones((1, 3, 16, 16), np.float32)},))
    thread.start()
    thread.join()
    assert model.engine.gpu.worker is not None
    x = torch.randn(1, 3, 16, 16, device="cuda")
    binding.inputs["x"].copy_(x)
    got = binding.run()["features"]
    assert got is binding.outputs["features"]
    np.testing.assert_allclose(got.cpu().numpy(), reference(x.cpu().numpy()), rtol=1e-3, atol=1e-4)
