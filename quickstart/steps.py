"""The steps of ``lite quickstart``, each a plain function that returns what it measured.

train (train core) -> checkpoint -> ONNX -> convert (BatchNorm folded) -> run on the numpy engine
and ONNX Runtime -> serve over KServe v2 gRPC and query with tritonclient, a raw PNG included.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IMAGE_SIZE = 32
# The PNG sent to the server is the 32x32 digit as 8-bit grey; this spec undoes that encoding.
PREPROCESSING = {"color": "L", "scale": 1 / 255, "mean": [0.0], "std": [1.0], "layout": "NCHW", "input": "input"}


@dataclass
class Measured:
    path: str
    accuracy: float
    file_bytes: int | None = None
    ms_per_sample: float | None = None


def lenet5_bn():
    """LeNet5 with BatchNorm after each convolution (so conversion has BatchNorm to fold)."""
    from train import nn

    return nn.SequentialCell(
        nn.Conv2d(1, 6, 5, pad_mode="valid"), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(6, 16, 5, pad_mode="valid"), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Dense(400, 120), nn.ReLU(), nn.Dense(120, 84), nn.ReLU(), nn.Dense(84, 10),
    )


def train_lenet(workdir: Path, epochs: int, seed: int):
    """Train on scikit-learn's digits; save a MindSpore-format checkpoint. Returns (net, accuracy, ckpt)."""
    from train import Model, nn, num_threads, save_checkpoint, set_seed
    from train.dataset import DigitsDataset

    set_seed(seed)
    net = lenet5_bn()
    train_set = DigitsDataset("train", image_size=IMAGE_SIZE, shuffle=True, seed=seed).batch(32)
    test_set = DigitsDataset("test", image_size=IMAGE_SIZE).batch(256)
    schedule = nn.CosineDecayLR(0.0, 0.05, train_set.get_dataset_size() * epochs)
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=schedule, momentum=0.9, weight_decay=1e-4)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer,
                  metrics={"accuracy"})
    with num_threads(1):  # small layers: one BLAS thread is fastest on shared cores
        model.train(epochs, train_set)
        accuracy = model.eval(test_set)["accuracy"]
    checkpoint = save_checkpoint(net, workdir / "lenet5_bn")
    return net, accuracy, Path(checkpoint)


def test_arrays() -> tuple[np.ndarray, np.ndarray]:
    from train.dataset.loaders import load_digits_arrays

    return load_digits_arrays("test", image_size=IMAGE_SIZE)


def export_and_convert(net, workdir: Path) -> tuple[Path, Path, dict]:
    """ONNX from the train core (BatchNormalization kept), then a .lite with it folded away."""
    import converter
    from lite.format import load, save
    from train import Tensor, export

    onnx_path = export(net, Tensor(np.zeros((1, 1, IMAGE_SIZE, IMAGE_SIZE), np.float32)),
                       file_name=workdir / "lenet5_bn", file_format="ONNX")
    lite_path = workdir / "lenet5_bn.lite"
    report = converter.convert(str(onnx_path), str(lite_path))
    model = load(lite_path)
    model.metadata["labels"] = json.dumps([str(d) for d in range(10)])
    model.metadata["preprocessing"] = json.dumps(PREPROCESSING)
    save(model, lite_path)
    before, after = report.before.ops, report.after.ops
    folded = {"BatchNormalization before": before.get("BatchNormalization", 0),
              "BatchNormalization after": after.get("BatchNormalization", 0),
              "nodes before": sum(before.values()), "nodes after": sum(after.values())}
    return Path(onnx_path), lite_path, folded


def quantize_int8(onnx_path: Path, workdir: Path) -> Path:
    """int8 static quantization calibrated on 256 training digits (QDQ: ONNX Runtime runs int8 kernels)."""
    import converter
    from lite.format import load, save
    from train.dataset.loaders import load_digits_arrays

    calibration, _ = load_digits_arrays("train", image_size=IMAGE_SIZE)
    int8_path = workdir / "lenet5_bn_int8.lite"
    converter.convert(str(onnx_path), str(int8_path), quant="int8", calibration_data=list(calibration[:256]),
                      calibration_size=256)
    model = load(int8_path)
    model.metadata["labels"] = json.dumps([str(d) for d in range(10)])
    save(model, int8_path)
    return int8_path


def run_engine(path: Path, device: str, images: np.ndarray, labels: np.ndarray, label: str = "fp32") -> Measured:
    import lite

    model = lite.Model.load(path, device=device)
    model.predict({"input": images[:8]})  # warm-up
    start = time.perf_counter()
    logits = model.predict({"input": images})[model.outputs[0].name]
    elapsed = time.perf_counter() - start
    engine = {"numpy": "numpy engine", "cpu": "ONNX Runtime CPU", "cuda": "ONNX Runtime CUDA"}.get(model.device, model.device)
    return Measured(f"{label} .lite, {engine}", float(np.mean(logits.argmax(1) == labels)),
                    path.stat().st_size, elapsed * 1e3 / len(images))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """``lite serve`` in a child process on a free loopback port; stopped with SIGTERM."""

    def __init__(self, repository: Path, log: Path) -> None:
        self.port = free_port()
        self.log = open(log, "wb")
        command = [sys.executable, "-m", "serving", "--repository", str(repository), "--host", "127.0.0.1",
                   "--port", str(self.port), "--metrics-port", "0", "--log-format", "text"]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ))
        self.address = f"127.0.0.1:{self.port}"

    def wait_ready(self, client, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.process.returncode}; see {self.log.name}")
            try:
                if client.is_server_ready():
                    return
            except Exception:  # not listening yet
                pass
            time.sleep(0.2)
        raise TimeoutError(f"the server was not ready within {timeout:.0f} s; see {self.log.name}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


def serve_and_query(lite_path: Path, workdir: Path, images: np.ndarray, labels: np.ndarray,
                    progress) -> tuple[Measured, dict]:
    """Serve the .lite twice (tensors; PNG bytes through preprocessing) and query both with tritonclient."""
    import tritonclient.grpc as grpcclient

    repository = workdir / "models"
    for name, config in (("digits", {"max_batch_size": 64, "dynamic_batching": {"max_queue_delay_us": 200}}),
                         ("digits_png", {"max_batch_size": 8, "preprocessing": "image"})):
        folder = repository / name / "1"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.lite").write_bytes(lite_path.read_bytes())
        (repository / name / "config.json").write_text(json.dumps(config, indent=2))
    server = Server(repository, workdir / "server.log")
    try:
        client = grpcclient.InferenceServerClient(server.address)
        server.wait_ready(client)
        correct, start = 0, time.perf_counter()
        for first in range(0, len(images), 64):
            batch = images[first:first + 64]
            request = grpcclient.InferInput("input", list(batch.shape), "FP32")
            request.set_data_from_numpy(batch)
            scores = client.infer("digits", [request]).as_numpy(_output_name(client, "digits"))
            correct += int(np.sum(scores.argmax(1) == labels[first:first + 64]))
            progress(first + len(batch), len(images))
        elapsed = time.perf_counter() - start
        served = Measured("served (tritonclient, gRPC)", correct / len(images), None, elapsed * 1e3 / len(images))
        png = _png(images[0])
        request = grpcclient.InferInput("input", [1], "BYTES")  # a batch of one encoded image
        request.set_data_from_numpy(np.array([png], dtype=object))
        output = grpcclient.InferRequestedOutput(_output_name(client, "digits_png"), class_count=1)
        top = client.infer("digits_png", [request], outputs=[output]).as_numpy(output.name())
        answer = top.reshape(-1)[0].decode().split(":")
        png_result = {"png_bytes": len(png), "predicted": answer[-1], "label": str(int(labels[0]))}
        client.close()
    finally:
        exit_code = server.stop()
    png_result["server_exit_code"] = exit_code
    return served, png_result


def _output_name(client, model: str) -> str:
    return client.get_model_metadata(model).outputs[0].name


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    pixels = np.clip(np.rint(image[0] * 255), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()
