"""``lite compile MODEL --device cuda --batch-sizes 1 8 64 256``: compile ahead of deployment.

Compiles the model with the torch engine for each batch size on this machine's GPU and writes
the artifacts as a package beside the model (``MODEL.compiled/``, or ``--output``), stamped with
the GPU architecture and the versions they depend on (:mod:`lite.engines.torch.precompiled`).
``lite.Model.load(MODEL, engine="torch", device="cuda")`` and ``lite serve`` then find the
package and load the artifacts instead of compiling (seconds instead of minutes per batch size);
on a machine the package was not built for they say why and compile as usual.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from lite.commands._model_file import load_checked
from lite.errors import EngineUnavailableError, InvalidInputError

# The torch engine's modes that compile (lite.engines.torch.inductor_modes.MODES without eager; not
# imported from there, which would import torch to build the command line).
COMPILING_MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def register(subparsers) -> None:
    parser = subparsers.add_parser("compile", help="compile a model for a GPU ahead of deployment (torch engine)")
    parser.add_argument("model", help="path to a .lite file")
    parser.add_argument("--device", default="cuda", help="the GPU to compile for: cuda or cuda:N (default cuda)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", required=True, metavar="N",
                        help="the batch sizes to compile (each is one artifact)")
    parser.add_argument("--output", "-o", metavar="DIR", help="the package folder (default: MODEL.compiled beside it)")
    parser.add_argument("--mode", default="auto", choices=COMPILING_MODES,
                        help="the Inductor mode (default auto: for each batch size, the faster of max-autotune "
                             "and reduce-overhead, both compiled and timed here)")
    parser.add_argument("--precision", choices=("exact", "fp16"), default=None,
                        help="the precision policy (default: the one the model was converted for)")
    parser.add_argument("--cache-dir", metavar="DIR", default=None,
                        help="the cache root to compile in (default: lite's, so artifacts this machine already "
                             "compiled are reused)")
    parser.set_defaults(handler=compile_command)


def compile_command(args: argparse.Namespace) -> int:
    if not args.device.startswith("cuda"):
        raise EngineUnavailableError(f"lite compile compiles for a CUDA GPU; got --device {args.device!r}")
    if any(size < 1 for size in args.batch_sizes):
        raise InvalidInputError(f"--batch-sizes must be positive integers; got {args.batch_sizes}")
    load_checked(args.model)
    import torch

    from lite.engines import default_cache_dir
    from lite.engines.torch import precompiled
    from lite.model import Model
    from lite.sample_inputs import random_feeds

    output = Path(args.output) if args.output else precompiled.default_location(args.model)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    staging = output.with_name(output.name + ".partial")
    try:
        model = Model.load(args.model, engine="torch", device=args.device, precision=args.precision,
                           mode=args.mode, cache_dir=cache, startup="best", precompiled=None)
        engine = model.engine
        rows = []
        for size in sorted(set(args.batch_sizes)):
            for spec in model.inputs:
                if spec.shape is None or not spec.shape or not isinstance(spec.shape[0], str):
                    if size != 1:
                        raise InvalidInputError(f"input {spec.name!r} has no symbolic batch dimension "
                                                f"(shape {spec.shape}); only --batch-sizes 1 applies")
            feeds = random_feeds(model.ir, size)
            started = time.perf_counter()
            for _ in range(3):  # the first call compiles; the next ones record the kernels' launch tuning
                model.predict(feeds)
            torch.cuda.synchronize()
            rows.append((size, time.perf_counter() - started))
            print(f"batch {size}: compiled in {rows[-1][1]:.1f} s", file=sys.stderr, flush=True)
        keys = sorted({key for runner in engine.aot_runners() for key in runner.artifact_keys})
        declined = [r.aot_declined for r in engine.aot_runners() if r.aot_declined]
        if declined:
            raise EngineUnavailableError(f"the model could not be compiled ahead of time: {declined[0]}")
        source = Path(engine.cache_dir) / "compiled"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "compiled").mkdir(parents=True)
        for key in keys:
            shutil.copytree(source / key, staging / "compiled" / key)
        settings = {"mode": engine.mode, "precision": engine.compute_precision}
        choices = {key: record for runner in engine.aot_runners() for key, record in runner.choices.items()}
        manifest = precompiled.write_manifest(staging, engine.device, precompiled.file_digest(args.model),
                                              sorted(set(args.batch_sizes)), settings, keys, choices)
        shutil.rmtree(output, ignore_errors=True)
        staging.rename(output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size_mb = sum(f.stat().st_size for f in output.rglob("*") if f.is_file()) / 1e6
    print(json.dumps({"package": str(output), "artifacts": len(keys), "megabytes": round(size_mb, 1),
                      "built_for": manifest["built_for"],
                      "modes": {" ".join(str(s) for s in record["shapes"]): {"mode": record["mode"],
                                                                           "ms_per_call": record["ms_per_call"]}
                                for record in choices.values()},
                      "compile_seconds": {str(b): round(t, 1) for b, t in rows}}, indent=2))
    return 0
