"""``lite inspect MODEL``: what a .lite file holds, as a table, JSON or a drawing of the graph."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from lite.atomic import atomic_path, atomic_write
from lite.commands._model_file import load_checked
from lite.format import ir, qdq
from lite.format.dtypes import DataType
from lite.format.verifier import verify_flatbuffer
from lite.format.writer import COMPACT_SINCE


def summarize(model: ir.Model, path: str | None = None) -> dict[str, Any]:
    """A JSON-ready description of ``model``: signature, ops, parameters, quantization, metadata,
    and with ``path`` where the file's bytes go.

    Parameters are the constants the file stores: a quantized weight counts once, as its integer
    tensor, not with the scale and zero-point constants the reader writes out for its QDQ nodes.
    """
    main = model.main

    def spec(index: int) -> dict[str, Any]:
        tensor = main.tensors[index]
        return {"name": tensor.name, "dtype": tensor.dtype.name,
                "shape": None if tensor.shape is None else list(tensor.shape)}

    ops: Counter[str] = Counter()
    parameters: dict[str, dict[str, int]] = {}
    quantized: Counter[str] = Counter()
    for graph in model.graphs:
        for node in graph.nodes:
            ops[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    for graph in stored_graphs(model):
        for tensor in graph.tensors:
            if tensor.is_constant:
                entry = parameters.setdefault(tensor.dtype.name, {"tensors": 0, "elements": 0, "bytes": 0})
                entry["tensors"] += 1
                entry["elements"] += int(np.prod(tensor.shape, dtype=np.int64))
                entry["bytes"] += 0 if tensor.dtype == DataType.STRING else int(tensor.data.nbytes)
            if tensor.quant is not None:
                q = tensor.quant
                granularity = "per-tensor" if q.axis is None else ("per-block" if q.block_size else "per-axis")
                sign = "int" if q.signed else "uint"
                quantized[f"{sign}{q.bits} {granularity}{' symmetric' if q.symmetric else ''}"] += 1
    summary = {
        "file": path,
        "file_size": os.path.getsize(path) if path else None,
        "format_version": f"{model.version[0]}.{model.version[1]}",
        "opset_imports": {d or "ai.onnx": v for d, v in model.opset_imports.items()},
        "graphs": len(model.graphs),
        "nodes": sum(len(g.nodes) for g in model.graphs),
        "inputs": [spec(i) for i in main.inputs],
        "outputs": [spec(i) for i in main.outputs],
        "ops": dict(sorted(ops.items(), key=lambda item: (-item[1], item[0]))),
        "parameters": {
            "count": sum(p["elements"] for p in parameters.values()),
            "bytes": sum(p["bytes"] for p in parameters.values()),
            "by_dtype": parameters,
        },
        "quantization": dict(quantized),
        "metadata": dict(model.metadata),
        "stored": stored_bytes(path) if path else None,
    }
    return summary


def stored_graphs(model: ir.Model) -> list[ir.Graph]:
    """The graphs as the file holds them. From format 2.0 each QDQ group is stored as its one
    tensor (:mod:`lite.format.qdq`); the reader's explicit scale and zero-point constants are not
    in the file, and counting them made an int8 file's parameters look larger than its weights."""
    if tuple(model.version) < COMPACT_SINCE:
        return model.graphs
    return [qdq.compact(graph)[0] for graph in model.graphs]


def stored_bytes(path: str | os.PathLike) -> dict[str, int]:
    """Where the file's bytes go: ``structure`` (the flatbuffer: names, tensor, node and
    quantization tables, with its size prefix), ``weights`` (the constants' buffers) and
    ``alignment`` (the zeros that put each buffer on a 64-byte boundary)."""
    with open(path, "rb") as handle:
        structure = 4 + int.from_bytes(handle.read(4), "little")
        handle.seek(0)
        root = verify_flatbuffer(memoryview(handle.read(structure)))
    weights = sum(int(buffer["length"]) for buffer in root["buffers"] or [])
    return {"structure": structure, "weights": weights,
            "alignment": os.path.getsize(path) - structure - weights}


def render_text(summary: dict[str, Any]) -> str:
    def shape(entry: dict[str, Any]) -> str:
        if entry["shape"] is None:
            return "[?]"
        return "[" + ", ".join("?" if d is None else str(d) for d in entry["shape"]) + "]"

    lines = []
    if summary["file"]:
        lines.append(f"{summary['file']}  ({_bytes(summary['file_size'])}, format {summary['format_version']})")
    opsets = ", ".join(f"{d} {v}" for d, v in summary["opset_imports"].items())
    lines.append(f"graphs: {summary['graphs']}   nodes: {summary['nodes']}   opsets: {opsets}")
    for title in ("inputs", "outputs"):
        lines.append(f"{title}:")
        for entry in summary[title]:
            lines.append(f"  {entry['name']:<24} {entry['dtype']:<10} {shape(entry)}")
    stored = summary.get("stored")
    if stored:
        lines.append(f"file: {_bytes(stored['structure'])} structure (names, tensor, node and quantization tables)"
                     f" + {_bytes(stored['weights'])} weights + {_bytes(stored['alignment'])} alignment")
    params = summary["parameters"]
    lines.append(f"parameters: {params['count']:,} in {_bytes(params['bytes'])}")
    for dtype, entry in sorted(params["by_dtype"].items()):
        lines.append(f"  {dtype:<10} {entry['tensors']:>5} tensors {entry['elements']:>14,} elements {_bytes(entry['bytes']):>10}")
    lines.append("ops:")
    for op, count in summary["ops"].items():
        lines.append(f"  {op:<32} {count:>6}")
    if summary["quantization"]:
        lines.append("quantization:")
        for kind, count in summary["quantization"].items():
            lines.append(f"  {kind:<32} {count:>6} tensors")
    if summary["metadata"]:
        lines.append("metadata:")
        for key, value in summary["metadata"].items():
            shown = value if len(value) <= 80 else value[:77] + "..."
            lines.append(f"  {key}: {shown}")
    return "\n".join(lines)


def _bytes(count: int | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def to_dot(model: ir.Model) -> str:
    """The main graph as Graphviz DOT: a box per node, an edge per tensor (labelled with its shape)."""
    graph = model.main
    producer: dict[int, str] = {}
    lines = ["digraph lite {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica"];']
    for index in graph.inputs:
        lines.append(f'  in{index} [label={json.dumps(graph.tensors[index].name)}, shape=ellipse, fillcolor="#dff5e1"];')
        producer[index] = f"in{index}"
    for position, node in enumerate(graph.nodes):
        label = node.op_type
        if "fused_activation" in node.attributes:
            label += "+" + node.attributes["fused_activation"].value.decode()
        lines.append(f"  n{position} [label={json.dumps(label)}];")
        for index in node.inputs:
            if index in producer:
                shape = graph.tensors[index].shape
                edge_label = "" if shape is None else json.dumps("x".join("?" if d is None else str(d) for d in shape))
                lines.append(f"  {producer[index]} -> n{position}" + (f" [label={edge_label}]" if edge_label else "") + ";")
        for index in node.outputs:
            if index >= 0:
                producer[index] = f"n{position}"
    for index in graph.outputs:
        lines.append(f'  out{index} [label={json.dumps(graph.tensors[index].name)}, shape=ellipse, fillcolor="#fde2e1"];')
        if index in producer:
            lines.append(f"  {producer[index]} -> out{index};")
    lines.append("}")
    return "\n".join(lines) + "\n"


GRAPH_SUFFIXES = (".dot", ".svg", ".png", ".pdf")


def check_graph_target(target: Path) -> None:
    """Refuse a ``--graph`` name that cannot be written, before any work is done."""
    if target.suffix not in GRAPH_SUFFIXES:
        raise ValueError(f"--graph {target}: use a .dot, .svg, .png or .pdf file name")
    if not target.parent.is_dir():
        raise ValueError(f"--graph {target}: the folder {target.parent} does not exist")


def write_graph(model: ir.Model, target: Path) -> str:
    """Draw the graph to ``target`` (.dot, or .svg/.png/.pdf through Graphviz); returns what was written."""
    check_graph_target(target)
    dot = to_dot(model)
    if target.suffix == ".dot":
        _write_text(target, dot)
        return str(target)
    executable = shutil.which("dot")
    if executable is None:
        fallback = target.with_suffix(".dot")
        _write_text(fallback, dot)
        return f"{fallback} (Graphviz 'dot' is not installed, so DOT text was written instead of {target.suffix})"
    with atomic_path(target) as temporary:
        subprocess.run([executable, f"-T{target.suffix[1:]}", "-o", str(temporary)], input=dot.encode(), check=True)
    return str(target)


def _write_text(target: Path, text: str) -> None:
    with atomic_write(target) as handle:
        handle.write(text.encode())


def register(subparsers) -> None:
    parser = subparsers.add_parser("inspect", help="show a .lite model's signature, ops, parameters and metadata")
    parser.add_argument("model", help="path to a .lite file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--graph", metavar="FILE", help="draw the main graph to FILE (.dot, or .svg/.png/.pdf with Graphviz)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.graph:
        check_graph_target(Path(args.graph))
    model = load_checked(args.model)
    summary = summarize(model, args.model)
    print(json.dumps(summary, indent=2) if args.json else render_text(summary))
    if args.graph:
        written = write_graph(model, Path(args.graph))
        print(f"graph written to {written}", file=sys.stderr)
    return 0
