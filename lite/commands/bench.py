"""``lite bench MODEL``: latency, throughput, peak memory, per-node profile, engine comparison.

    lite bench model.lite --batch 8 --loops 100 --warmup 10
    lite bench model.lite --memory            # peak activation bytes vs the lifetime lower bound
    lite bench model.lite --profile           # time per node and per op type
    lite bench model.lite --compare cpu       # max abs error, cosine, top-1 agreement vs another engine
    lite bench --grpc 127.0.0.1:8001 --model resnet --concurrency 8 --duration 10   # a running server
    lite bench model.lite --autotune 1,8 --precision bf16   # measure every engine, record the choice

A served model is measured by a plug-in: ``--grpc`` loads the ``grpc`` entry point of the
``lite.bench_backends`` group (declared by the package that provides it; serving's comes with
the ``serve`` extra) and hands it the parsed arguments. The runtime never imports that package.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import tracemalloc
import warnings
from collections import defaultdict
from importlib.metadata import entry_points
from typing import Any

import numpy as np

from lite.atomic import atomic_write, check_writable
from lite.commands._engine_options import add_engine_options, library_options
from lite.commands._inputs import (
    describe_inputs,
    named_shapes,
    parse_shape_overrides,
    random_inputs,
    read_inputs,
)
from lite.commands._model_file import load_checked
from lite.compare import compare_outputs
from lite.engines import PRECISIONS
from lite.errors import AutotuneSkippedWarning, SampleInputError
from lite.format import load as load_model
from lite.model import DEVICES, Model
from lite.signature import TensorSpec


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure latency, throughput, memory; profile; compare engines")
    parser.add_argument("model", nargs="?", help="path to a .lite file (or use --grpc)")
    add_engine_options(parser)
    parser.add_argument("--batch", type=int, default=None,
                        help="size of symbolic leading dimensions (default 1); an input given by --shape or "
                             "--input takes its size from there, and a --batch that disagrees with it is an error")
    parser.add_argument("--shape", action="append", metavar="NAME:D1,D2,...",
                        help="the whole shape of an input's random data (repeatable); other symbolic sizes are "
                             "those the converter verified the model on, else planned from the graph and tried "
                             "(the header prints the shapes used)")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE", help="real inputs (.npy/.npz)")
    parser.add_argument("--threads", type=int, help="intra-op threads (ONNX Runtime engines)")
    parser.add_argument("--loops", type=int, default=50, help="timed runs (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    parser.add_argument("--memory", action="store_true", help="report peak activation memory")
    parser.add_argument("--profile", action="store_true", help="time per node and per op type (numpy engine)")
    parser.add_argument("--compare", choices=DEVICES, metavar="DEVICE", help="compare outputs with another engine")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--autotune", nargs="?", const="", metavar="BATCHES",
                        help="measure every engine (numpy, ONNX Runtime, OpenVINO, ...) at these batch sizes "
                             "(comma separated; default --batch), record the fastest per batch size as "
                             "Model.load(engine='auto') reuses it, then time the choice")
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="precision policy for --autotune and --engine: exact, fp16 or bf16 (default: exact for --autotune, the model's own for --engine)")
    served = parser.add_argument_group("a model behind a server (plug-in, e.g. the 'serve' extra)")
    served.add_argument("--grpc", metavar="ADDR", help="load-test a KServe v2 gRPC server (host:port)")
    served.add_argument("--model", dest="served_model", metavar="NAME", help="the served model's name")
    served.add_argument("--concurrency", type=int, default=1, help="requests in flight (default 1)")
    served.add_argument("--duration", type=float, default=10.0, help="seconds measured (default 10)")
    parser.set_defaults(handler=run)


# Plug-ins in the ``lite.bench_backends`` entry-point group, and the extra that provides each.
BENCH_BACKENDS = {"grpc": "serve"}


def run(args: argparse.Namespace) -> int:
    if args.concurrency < 1 or not math.isfinite(args.duration) or args.duration <= 0:
        raise ValueError(f"--concurrency must be >= 1 and --duration a number of seconds > 0 "
                         f"(got {args.concurrency} and {args.duration})")
    if args.json:
        check_writable(args.json, "--json")  # now, not after the measurements
    if args.grpc is not None:
        if args.model is not None:
            raise ValueError(f"give a .lite file or --grpc ADDR, not both (got {args.model!r} and --grpc)")
        # A plug-in reads --batch as a number: 1 where it was not given.
        return run_backend("grpc", argparse.Namespace(**{**vars(args), "batch": args.batch or 1}))
    if args.model is None:
        raise ValueError("give a .lite file to measure, or --grpc ADDR --model NAME for a served model")
    if args.loops < 1 or args.warmup < 0 or (args.batch is not None and args.batch < 1):
        raise ValueError("--loops and --batch must be >= 1 and --warmup >= 0")
    load_checked(args.model)  # refuses what the engines would fail on with a traceback
    if args.autotune is not None:
        if args.custom_op_library:
            raise ValueError("--autotune measures every engine, --custom-op-library is ONNX Runtime's alone: "
                             "bench one --device without --autotune")
        model = autotune(args)
    else:
        options = {"precision": args.precision} if args.engine is not None and args.precision else {}
        options.update(library_options(args))
        model = Model.load(args.model, device=args.device, threads=args.threads, engine=args.engine, **options)
    feeds = _inputs(model, args)
    batch = next(iter(feeds.values())).shape[0] if feeds and next(iter(feeds.values())).ndim else 1
    results: dict[str, Any] = {"model": args.model, "device": model.device, "batch": int(batch),
                               "inputs": {k: list(v.shape) for k, v in feeds.items()}}
    if args.autotune is not None:
        results["autotune"] = model.engine.decision
    results["latency_ms"] = time_runs(model, feeds, args.loops, args.warmup)
    results["throughput_per_s"] = batch * 1e3 / results["latency_ms"]["median"]
    print(f"{args.model} on {model.device}, batch {batch}, {args.loops} runs after {args.warmup} warm-up")
    int8 = int8_kernels(model)
    if int8 is not None:
        results["int8"] = int8
        print(f"int8: {int8}")
    print(f"inputs: {describe_inputs(model, feeds)}")
    if not args.input and _chose_sizes(model, named_shapes(model.inputs, parse_shape_overrides(args.shape))):
        print("  random; symbolic sizes beyond the batch: those the converter verified the model on, else planned "
              "from the graph (--shape NAME:D1,D2,... sets them)")
    lat = results["latency_ms"]
    print(f"latency ms: min {lat['min']:.3f}  median {lat['median']:.3f}  p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}")
    print(f"throughput: {results['throughput_per_s']:.1f} samples/s")
    if args.memory:
        results["memory"] = measure_memory(model, feeds)
        mem = results["memory"]
        print(f"activations: peak live {mem['peak_live_bytes'] / 2**20:.2f} MiB (lifetime lower bound), "
              f"peak allocated {mem['peak_allocated_bytes'] / 2**20:.2f} MiB "
              f"({mem['ratio_to_bound']:.2f}x the bound, kernel scratch included)")
    if args.profile:
        results["profile"] = profile(model, feeds, max(1, min(args.loops, 20)))
        print_profile(results["profile"])
    if args.compare:
        libraries = {} if args.compare == "numpy" else library_options(args)
        other = Model.load(args.model, device=args.compare, threads=args.threads, **libraries)
        results["compare"] = compare(model.predict(feeds), other.predict(feeds))
        results["compare"]["against"] = other.device
        for name, stats in results["compare"]["outputs"].items():
            top1 = "" if stats["top1_agreement"] is None else f"  top-1 agreement {stats['top1_agreement']:.2%}"
            print(f"vs {other.device} {name}: max abs error {stats['max_abs_error']:.3g}  cosine {stats['cosine']:.6f}{top1}")
    if args.json:
        with atomic_write(args.json) as handle:
            handle.write(json.dumps(results, indent=2).encode())
    return 0


_INT8_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
             "QLinearConv", "QLinearMatMul", "QGemm", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}


def int8_kernels(model: Model) -> str | None:
    """How ONNX Runtime runs an int8 model on this CPU, in words: its int8 kernels or the float
    form, why, and whether its weights went to it as uint8 (a CPU whose u8 x s8 products
    saturate); None for other models and engines."""
    engine = model.engine
    if not hasattr(engine, "unsigned_weights") or not {n.op_type for n in engine.model.main.nodes} & _INT8_OPS:
        return None
    decision = engine.decision if isinstance(engine.decision, dict) and "chosen" in engine.decision else {
        "chosen": "int8", "why": "the kernels it was quantized for: no choice to make"}
    form = "the float form" if decision["chosen"] == "float" else "the int8 kernels"
    text = f"{form} ({decision.get('why', 'as recorded')})"
    if engine.unsigned_weights and decision["chosen"] != "float":
        text += "; weights as uint8: this CPU's uint8 x int8 products saturate (no VNNI), uint8 x uint8 are exact"
    return text


def _inputs(model: Model, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Real inputs (``--input``) or random ones (``--batch``, ``--shape``). An input whose leading
    size ``--shape`` or ``--input`` gives keeps it; a ``--batch`` that says otherwise is refused
    rather than silently ignored."""
    if args.input:
        feeds = read_inputs(model, args.input)
        given = {name: value.shape for name, value in feeds.items()}
        source = "--input"
    else:
        given = named_shapes(model.inputs, parse_shape_overrides(args.shape))
        feeds = random_inputs(model, args.batch if args.batch is not None else 1, given)
        source = "--shape"
    if args.batch is not None:
        for name, shape in given.items():
            if len(shape) and shape[0] != args.batch:
                raise ValueError(
                    f"--batch {args.batch} and {source} {name} (leading dimension {shape[0]}, shape "
                    f"{list(shape)}) disagree: give the batch in {source}, or drop --batch"
                )
    return feeds


def _chose_sizes(model: Model, given: dict[str, tuple[int, ...]]) -> bool:
    """Whether an input without ``--shape`` has symbolic dimensions beyond its batch, whose
    sizes bench chose."""
    return any(spec.shape is not None and any(not isinstance(dim, int) for dim in spec.shape[1:])
               for spec in model.inputs if spec.name not in given)


def autotune(args: argparse.Namespace) -> Model:
    """``--autotune``: measure afresh (retune), print the table, return the model bound to the choice."""
    try:
        sizes = [int(size) for size in args.autotune.split(",") if size] or [args.batch or 1]
    except ValueError as err:
        raise ValueError(f"--autotune {args.autotune!r}: expected batch sizes like 1,8") from err
    graph = load_model(args.model).main
    shapes = named_shapes([TensorSpec.of(graph.tensors[index]) for index in graph.inputs],
                          parse_shape_overrides(args.shape))
    try:
        with warnings.catch_warnings():
            # Asked to measure: random inputs that run nothing are this command's error, not a fallback.
            warnings.simplefilter("error", AutotuneSkippedWarning)
            model = Model.load(args.model, device=args.device, threads=args.threads, engine="auto",
                               batch_sizes=sizes, precision=args.precision or "exact", retune=True,
                               input_shapes=shapes or None)
    except AutotuneSkippedWarning as warning:
        raise SampleInputError(f"--autotune: {warning.reason}") from None
    decision = model.engine.decision
    print(f"autotune ({decision['settings']['precision']}, tolerance {decision['tolerance']:g} of the output's peak "
          f"vs the numpy engine), recorded in {decision.get('path', '(no cache)')}")
    print(f"  {'batch':<7}{'engine':<20}{'relative':>9}{'best ms':>10}{'median ms':>11}{'spread':>8}{'error':>11}"
          "  verdict")
    for bucket in decision["buckets"]:
        for label, entry in bucket["candidates"].items():
            timing = entry.get("ms", {})
            relative = f"{timing['relative']:.2f}x" if timing else "-"
            best = f"{timing['best_round']:.3f}" if timing else "-"
            median = f"{timing['median']:.3f}" if timing else "-"
            spread = f"{timing['spread']:.0%}" if timing else "-"
            error = f"{entry['error']:.2g}" if "error" in entry else "-"
            verdict = "chosen" if label == bucket["chosen"] else entry.get("rejected", "")
            batch = "any" if bucket["batch"] is None else bucket["batch"]
            print(f"  {batch!s:<7}{label:<20}{relative:>9}{best:>10}{median:>11}{spread:>8}{error:>11}  {verdict}")
    for label, reason in decision["unavailable"].items():
        print(f"  {'':<7}{label:<20}  unavailable: {reason[:120]}")
    return model


def run_backend(name: str, args: argparse.Namespace) -> int:
    """Hand ``args`` to the ``name`` plug-in of ``lite.bench_backends``: ``fn(args) -> exit code``."""
    extra = BENCH_BACKENDS[name]
    found = [entry for entry in entry_points(group="lite.bench_backends") if entry.name == name]
    reason = ""
    if found:
        try:
            backend = found[0].load()
        except ImportError as err:
            reason = f" ({err})"
        else:
            return int(backend(args) or 0)
    print(f"lite bench --{name}: this needs the '{extra}' extra: "
          f"pip install 'lite-toolchain[{extra}]'{reason}", file=sys.stderr)
    return 2


def time_runs(model: Model, feeds: dict[str, np.ndarray], loops: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        model.predict(feeds)
    show_progress = sys.stderr.isatty() and loops >= 20
    times = []
    for index in range(loops):
        start = time.perf_counter()
        model.predict(feeds)
        times.append((time.perf_counter() - start) * 1e3)
        if show_progress and (index % 10 == 0 or index == loops - 1):
            print(f"\r  run {index + 1}/{loops}  median so far {np.median(times):.3f} ms", end="", file=sys.stderr)
    if show_progress:
        print(file=sys.stderr)
    values = np.array(times)
    return {"min": float(values.min()), "median": float(np.median(values)), "mean": float(values.mean()),
            "p90": float(np.percentile(values, 90)), "p99": float(np.percentile(values, 99)),
            "max": float(values.max())}


def _numpy_engine(model: Model):
    if getattr(model.engine, "name", "") != "numpy":
        raise ValueError(f"--memory and --profile look inside the numpy engine; run them with --device numpy "
                         f"(this run uses {model.device})")
    return model.engine


def measure_memory(model: Model, feeds: dict[str, np.ndarray]) -> dict[str, float]:
    """Peak bytes of live activations (inputs and intermediates, not weights) over one run.

    ``peak_live_bytes`` is the largest set of tensors alive at once under the engine's schedule:
    the lower bound any allocator reaches by reusing dead buffers. ``peak_allocated_bytes`` is
    what the run holds at its peak: the engine's planned arena (large activations and kernel
    scratch) plus what numpy allocated outside it (tracemalloc).
    """
    engine = _numpy_engine(model)
    constants = {id(v) for v in engine.plans[0].constants.values()}
    input_bytes = sum(v.nbytes for v in feeds.values())
    peak = [0]

    def observe(node, seconds, values):
        live = sum(v.nbytes for v in values if isinstance(v, np.ndarray) and id(v) not in constants)
        peak[0] = max(peak[0], live)

    engine.run(feeds, observe)
    model.predict(feeds)  # warm caches so one-off allocations do not count
    tracemalloc.start()
    tracemalloc.reset_peak()
    baseline = tracemalloc.get_traced_memory()[0]
    engine.run(feeds)
    # The engine's arena was allocated in an earlier run (planned from it): count it explicitly.
    arena = engine.pool.held_bytes()
    allocated = tracemalloc.get_traced_memory()[1] - baseline + input_bytes + arena
    tracemalloc.stop()
    bound = max(peak[0], 1)
    return {"peak_live_bytes": peak[0], "peak_allocated_bytes": allocated, "arena_bytes": arena,
            "ratio_to_bound": allocated / bound}


def profile(model: Model, feeds: dict[str, np.ndarray], loops: int) -> dict[str, Any]:
    engine = _numpy_engine(model)
    per_node: dict[str, dict[str, Any]] = {}
    per_op: dict[str, float] = defaultdict(float)
    labels = _fused_labels(engine)

    def observe(node, seconds, values):
        label = labels.get(id(node), node.op_type)
        entry = per_node.setdefault(node.name, {"op_type": label, "ms": 0.0})
        entry["ms"] += seconds * 1e3 / loops
        per_op[label] += seconds * 1e3 / loops

    for _ in range(loops):
        engine.run(feeds, observe)
    nodes = sorted(({"node": k, **v} for k, v in per_node.items()), key=lambda e: -e["ms"])
    ops = sorted(({"op_type": k, "ms": v} for k, v in per_op.items()), key=lambda e: -e["ms"])
    return {"loops": loops, "nodes": nodes, "op_types": ops}


def _fused_labels(engine) -> dict[int, str]:
    """For each step of the main graph that runs one of the engine's own kernels (lite.engines:
    a fusion of several nodes, or a node specialized at load), a label naming that kernel beside
    the node the step stands under: a residual block's convolutions run in the step of its final
    Add, and were all counted as "Add" ("Add [ConvChain]" now). Single ops' kernels are lite.ops'."""
    labels = {}
    for step in engine.plans[0].steps:
        fn = step.fn
        module = getattr(fn, "__module__", None) or type(fn).__module__
        if module.startswith("lite.engines"):
            name = getattr(fn, "__name__", None) or type(fn).__name__
            labels[id(step.node)] = f"{step.node.op_type} [{name.strip('_')}]"
    return labels


def print_profile(result: dict[str, Any]) -> None:
    total = sum(e["ms"] for e in result["op_types"]) or 1.0
    print(f"\nper op type (mean of {result['loops']} runs):")
    for entry in result["op_types"]:
        print(f"  {entry['op_type']:<40} {entry['ms']:>9.3f} ms {100 * entry['ms'] / total:>6.1f}%")
    print("slowest nodes:")
    for entry in result["nodes"][:15]:
        print(f"  {entry['node'][:40]:<40} {entry['op_type']:<40} {entry['ms']:>9.3f} ms")


def compare(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per output: the largest error and cosine (lite.compare, IEEE-aware), and top-1 agreement
    along the last axis for score-like outputs."""
    outputs = {}
    for error in compare_outputs(reference, candidate):
        a, b = np.asarray(reference[error.name]), np.asarray(candidate.get(error.name))
        top1 = None
        if error.problem is None and a.ndim >= 2 and a.shape[-1] > 1 and a.dtype.kind in "fiu":
            top1 = float(np.mean(a.argmax(axis=-1) == b.argmax(axis=-1)))
        outputs[error.name] = {"max_abs_error": error.max_abs, "cosine": error.cosine, "top1_agreement": top1,
                               "nan_or_inf_mismatches": error.mismatched_special, "problem": error.problem}
    return {"outputs": outputs}
