"""Fuzz targets for what a program does with a .lite file after the bytes loader: the same mutated
files (:mod:`tests.fuzz.targets`' .lite seeds and mutators) through three more surfaces.

===========  ==========================================================  ==========================
format       surface                                                     documented outcome
===========  ==========================================================  ==========================
lite-path    ``Model.load(path, device="numpy")``, memory-mapped and     ``ModelFormatError``,
             with ``memory_map=False``                                   ``UnsupportedOpError``
lite-run     ``Model.load(data, device=D).predict(inputs)`` for every    any ``lite.LiteError``
             CPU engine installed (numpy; "cpu" = ONNX Runtime)
lite-cli     ``lite inspect --json --graph FILE.dot`` and ``lite run``   exit 0, or exit 1 with one
             through ``lite.cli.main`` in this process                   ``lite CMD: error:`` line
===========  ==========================================================  ==========================

The inputs ``lite-run`` and ``lite-cli`` feed are made from the model's declared input specs:
symbolic and unknown dimensions take 1 to 3, an unknown rank takes rank 1 or 2, and a declared
shape of more than :data:`MAX_INPUT_ELEMENTS` elements has its large dimensions replaced by 1 (the
engine must then refuse the shape with ``InvalidInputError``, never allocate what it declares).
Every value is drawn from a generator seeded by the input's bytes, so a replay feeds the same arrays.

``lite-run`` and ``lite-cli`` execute the graph, whose attributes legitimately size the work (a
Conv padded by 2**20 asks for a large output): the per-input peak-RSS check of the loaders is off
for them, and the worker's address-space cap is the bound. An allocation it refuses must come
back as a typed error (``KernelError``), never as a bare ``MemoryError``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import random
import zlib
from typing import Any

import numpy as np

from tests.fuzz.fuzz_target import Scratch, Seed, Target
from tests.fuzz.targets import _lite_seeds, _mutate_lite

MAX_INPUT_ELEMENTS = 1 << 16  # elements of one fed input; larger declared shapes are shrunk


class UntidyCommandFailure(Exception):
    """A command that failed without its one-line error (a traceback, another exit code): a finding."""


def cpu_engines() -> tuple[str, ...]:
    """The CPU devices of ``Model.load`` installed here: numpy always, ONNX Runtime's when present."""
    installed = all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))
    return ("numpy", "cpu") if installed else ("numpy",)


# ----- inputs ------------------------------------------------------------------------------------


def _shape(spec: Any, rng: random.Random) -> tuple[int, ...]:
    if spec.shape is None:
        return tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 2)))
    dims = [d if isinstance(d, int) and d >= 0 else rng.randint(1, 3) for d in spec.shape]
    if int(np.prod([min(d, MAX_INPUT_ELEMENTS + 1) for d in dims], dtype=np.float64)) > MAX_INPUT_ELEMENTS:
        dims = [1 if d > 64 else d for d in dims]
    return tuple(dims)


def _array(dtype: np.dtype | None, shape: tuple[int, ...], rng: random.Random) -> np.ndarray:
    dtype = np.dtype(np.float32) if dtype is None else np.dtype(dtype)
    generator = np.random.default_rng(rng.getrandbits(32))
    if dtype.kind == "O":
        return np.full(shape, b"ab", dtype=object)
    if dtype.kind == "b":
        return generator.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return generator.integers(0, 4, shape).astype(dtype)
    if dtype.kind in "fc":
        return generator.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)


def make_inputs(specs: list[Any], rng: random.Random) -> dict[str, Any]:
    """One value per declared input: an array, a list of arrays (sequence) or None/array (optional)."""
    feeds: dict[str, Any] = {}
    for spec in specs:
        shape = _shape(spec, rng)
        if spec.kind == "sequence":
            feeds[spec.name] = [_array(spec.dtype, shape, rng) for _ in range(rng.randint(0, 2))]
        elif spec.kind == "optional" and rng.random() < 0.5:
            feeds[spec.name] = None
        else:
            feeds[spec.name] = _array(spec.dtype, shape, rng)
    return feeds


def _input_rng(data: bytes) -> random.Random:
    # The mutated bytes already are a function of (seed, index): so are the arrays made for them.
    return random.Random(zlib.crc32(data))


# ----- the surfaces ------------------------------------------------------------------------------


def _run_path(data: bytes, options: dict[str, Any]) -> None:
    import lite

    path = Scratch.path("input.lite")
    path.write_bytes(data)
    lite.Model.load(str(path), device="numpy")
    lite.Model.load(str(path), device="numpy", memory_map=False)


def _run_engines(data: bytes, options: dict[str, Any]) -> str:
    """Load and predict on each CPU engine; the outcome names each engine's result."""
    import lite

    results = []
    for device in cpu_engines():
        extra = {"cache_dir": None, "optimization": "basic"} if device == "cpu" else {}
        try:
            model = lite.Model.load(data, device=device, threads=1, **extra)
            model.predict(make_inputs(model.inputs, _input_rng(data)))
            results.append(f"{device}=ok")
        except lite.LiteError as err:
            results.append(f"{device}={type(err).__name__}")
    return " ".join(results)


def _command(argv: list[str]) -> str:
    """``lite.cli.main(argv)`` with its output captured: "exit 0", or "exit 1" ending in one error line."""
    from lite import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    lines = err.getvalue().strip().splitlines()
    if code == 0:
        return "exit 0"
    prefix = f"lite {argv[0]}: error: "
    # numpy's RuntimeWarnings (overflow in a kernel) may precede the error line; a traceback may not.
    if code != 1 or not lines or not lines[-1].startswith(prefix) or "Traceback" in err.getvalue():
        raise UntidyCommandFailure(f"lite {' '.join(argv)} exited {code} with {err.getvalue()[-1500:]!r}")
    return "exit 1"


def _run_commands(data: bytes, options: dict[str, Any]) -> str:
    from lite.format import load

    path = Scratch.path("input.lite")
    path.write_bytes(data)
    graph = Scratch.path("graph.dot")
    inspected = _command(["inspect", str(path), "--json", "--graph", str(graph)])
    argv = ["run", str(path), "--device", "numpy"]
    with contextlib.suppress(Exception):  # an unreadable file gets no inputs; `lite run` must still say why
        from lite.model import Model

        specs = Model(load(data), engine=None).inputs
        feeds = make_inputs(specs, _input_rng(data))
        arrays = {name: value for name, value in feeds.items() if isinstance(value, np.ndarray) and value.dtype != object}
        inputs = Scratch.path("inputs.npz")
        np.savez(inputs, **arrays)
        argv += ["--input", str(inputs)]
    ran = _command(argv)
    return f"inspect {inspected}, run {ran}"


# ----- registry ----------------------------------------------------------------------------------


def _seeds() -> list[Seed]:
    return _lite_seeds()


def lite_path_target() -> Target:
    from lite.errors import ModelFormatError, UnsupportedOpError

    return Target("lite-path", _seeds(), _run_path, (ModelFormatError, UnsupportedOpError), _mutate_lite)


def lite_run_target() -> Target:
    return Target("lite-run", _seeds(), _run_engines, (), _mutate_lite, peak_check=False)


def lite_cli_target() -> Target:
    return Target("lite-cli", _seeds(), _run_commands, (), _mutate_lite, peak_check=False)
