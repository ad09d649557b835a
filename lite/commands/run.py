"""``lite run MODEL --input name=file.npy ... [--output-dir DIR] [--device D]``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from lite.atomic import atomic_write
from lite.commands._engine_options import add_engine_options, library_options
from lite.commands._inputs import read_inputs
from lite.commands._model_file import load_checked
from lite.model import Model


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a model on inputs from .npy/.npz files")
    parser.add_argument("model", help="path to a .lite file")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE",
                        help="an input as NAME=file.npy (repeat), a bare file.npy for single-input models, or a .npz")
    parser.add_argument("--output-dir", "-o", metavar="DIR", help="write each output to DIR/NAME.npy (characters other than letters, digits, '_', '.' and '-' "
                             "become '_'; an output whose file name another one has gets NAME-2.npy, ...)")
    add_engine_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    load_checked(args.model)  # refuses what the engines would fail on with a traceback
    model = Model.load(args.model, device=args.device, engine=args.engine, **library_options(args))
    outputs = model.predict(read_inputs(model, args.input))
    if args.output_dir:
        folder = Path(args.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        files = output_files(list(outputs))
    for name, value in outputs.items():
        value = np.asarray(value)
        line = f"{name}: {value.dtype}{list(value.shape)}"
        if value.size and value.dtype.kind in "fiub":
            line += f"  min {value.min():.6g}  max {value.max():.6g}  mean {value.mean(dtype=np.float64):.6g}"
        if args.output_dir:
            target = folder / files[name]
            with atomic_write(target) as handle:
                np.save(handle, value, allow_pickle=False)
            line += f"  -> {target}"
        print(line)
    return 0


def output_files(names: list[str]) -> dict[str, str]:
    """A file name per output, ``NAME.npy`` with every character but letters, digits, '_', '.'
    and '-' made '_'; names that would share a file (``a/b`` and ``a_b``, or ``A`` and ``a`` on a
    case-insensitive file system) get ``-2``, ``-3``, ... after the first, so no output is written
    over another."""
    taken: set[str] = set()
    files = {}
    for name in names:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"
        candidate, number = stem, 1
        while candidate.casefold() in taken:
            number += 1
            candidate = f"{stem}-{number}"
        taken.add(candidate.casefold())
        files[name] = f"{candidate}.npy"
    return files
