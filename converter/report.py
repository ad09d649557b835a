"""The conversion report: what went in, what each pass did, what came out, how close it is.

``ConversionReport.to_dict()`` is what ``--report report.json`` writes; ``table()`` is the short
summary the CLI prints.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from converter.passes.base import PassResult, all_graphs
from converter.verify import Verification
from converter.verify_spread import LEVELS
from lite.atomic import atomic_write
from lite.compare import OutputError, Tolerance


@dataclass
class GraphStats:
    nodes: int
    ops: Counter
    parameter_bytes: int

    @classmethod
    def of(cls, model: ir.Model) -> GraphStats:
        ops: Counter = Counter()
        parameter_bytes = 0
        for graph in all_graphs(model):
            ops.update(node.op_type for node in graph)
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is not None:
                    parameter_bytes += tensor.nbytes
        return cls(sum(ops.values()), ops, parameter_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "ops": dict(sorted(self.ops.items())), "parameter_bytes": self.parameter_bytes}


@dataclass
class ConversionReport:
    source: str
    output: str | None
    output_format: str
    source_sha256: str
    converter_version: str
    options: dict[str, Any]
    before: GraphStats | None = None
    after: GraphStats | None = None
    passes: list[PassResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    custom_ops: list[tuple[str, str, str]] = field(default_factory=list)
    verification: Verification | None = None
    seconds: float = 0.0

    def pass_counts(self) -> dict[str, int]:
        counts: Counter = Counter()
        for result in self.passes:
            counts[result.name] += result.changed
        return dict(counts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "output": self.output,
            "output_format": self.output_format,
            "source_sha256": self.source_sha256,
            "converter_version": self.converter_version,
            "options": self.options,
            "before": self.before.to_dict() if self.before else None,
            "after": self.after.to_dict() if self.after else None,
            "passes": [p.to_dict() for p in self.passes],
            "warnings": self.warnings,
            "custom_ops": [{"node": n, "op_type": o, "reason": r} for n, o, r in self.custom_ops],
            "verification": self.verification.to_dict() if self.verification else None,
            "seconds": round(self.seconds, 3),
        }

    def write_json(self, path: str | os.PathLike) -> None:
        with atomic_write(path) as handle:
            handle.write((json.dumps(self.to_dict(), indent=2) + "\n").encode())

    def table(self) -> str:
        """A short terminal summary: sizes, the passes that did something, verification."""
        lines = [f"{self.source} → {self.output or '(in memory)'}  [{self.seconds:.2f} s]"]
        if self.before and self.after:
            lines.append(f"  {'':<26}{'before':>12}{'after':>12}")
            lines.append(f"  {'nodes':<26}{self.before.nodes:>12}{self.after.nodes:>12}")
            lines.append(
                f"  {'parameters (MB)':<26}{self.before.parameter_bytes / 1e6:>12.2f}{self.after.parameter_bytes / 1e6:>12.2f}"
            )
            changed_ops = sorted(set(self.before.ops) | set(self.after.ops))
            for op in changed_ops:
                b, a = self.before.ops.get(op, 0), self.after.ops.get(op, 0)
                if a != b:
                    lines.append(f"  {'  ' + op:<26}{b:>12}{a:>12}")
        active = [p for p in self.passes if p.changed or p.declined]
        if active:
            lines.append(f"  {'pass':<26}{'changed':>12}{'declined':>12}")
            for result in active:
                lines.append(f"  {result.name:<26}{result.changed:>12}{len(result.declined):>12}")
        if self.custom_ops:
            lines.append(f"  custom ops kept: {len(self.custom_ops)} ({', '.join(sorted({o for _, o, _ in self.custom_ops}))})")
        if self.verification:
            verification = self.verification
            worst = verification.worst()
            if verification.skipped:
                pass  # said once, among the warnings
            elif worst is not None:
                status = "ok" if verification.passed else "FAILED"
                bound = verified_bound(verification.tolerance, worst)
                if worst.mismatched_values:  # integer outputs: a count, not a distance
                    lines.append(f"  verify ({verification.engine}): {status}  {bound}")
                else:
                    lines.append(
                        f"  verify ({verification.engine}): {status}  max abs {worst.max_abs:.3g}  "
                        f"max rel {worst.max_rel:.3g} ({bound})  cosine {worst.cosine:.6f}"
                    )
                lines.extend(f"  verify ({verification.engine}): {status}  {verified_bound(verification.tolerance, o)}"
                             for o in verification.outputs if o.mismatched_values and o is not worst)
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        return "\n".join(lines)


def verified_bound(tolerance: Tolerance, error: OutputError) -> str:
    """Which bound an output was held to, as the report prints it. An output that passed only
    because the reference itself moves that much (ONNX Runtime with and without its graph
    optimizations, or under a tiny nudge of its inputs) says so, with the numbers and the
    measurement, rather than showing an rtol it exceeds; one compared as a set of rows says that."""
    bound = _bound(tolerance, error)
    if error.unordered:
        return f"rows compared in any order, as the original's own runs order them differently; {bound}"
    return bound


def _bound(tolerance: Tolerance, error: OutputError) -> str:
    stated = f"rtol {tolerance.rtol:g}, atol {tolerance.atol:g}"
    spread = (tolerance.spread or {}).get(error.name)
    source = (tolerance.spread_source or {}).get(error.name, LEVELS)
    plain = dataclasses.replace(tolerance, spread=None)
    if not error.within(tolerance):
        if spread:
            measured = "" if source == LEVELS else f" {source}"
            return f"{stated}, or {tolerance.spread_factor:g} x the reference's own spread {spread:.3g}{measured}"
        return stated
    if error.mismatched_values:
        what = "rows have no counterpart" if error.unordered else "elements differ"
        return (f"{error.mismatched_values} {what}, within the reference's own spread: the original differs "
                f"in {spread:g} {source}, {tolerance.spread_factor:g} x that = "
                f"{tolerance.allowed_mismatches(error.name)} allowed on {error.name!r}")
    if error.max_abs <= max(tolerance.atol, tolerance.rtol * error.magnitude):
        return _within_stated(tolerance, error)
    if error.within(plain):
        return f"over rtol {tolerance.rtol:g}, within {np.dtype(error.dtype).name} rounding of its peak {error.magnitude:.3g}"
    allowed = tolerance.allowed(error.name, error.magnitude, error.dtype)
    return (f"over rtol {tolerance.rtol:g}; within the reference's own spread: the original moves by {spread:.3g} "
            f"{source}, {tolerance.spread_factor:g} x that = {allowed:.3g} allowed on {error.name!r}")


def _within_stated(tolerance: Tolerance, error: OutputError) -> str:
    """Which of the stated bounds an output met. One of small magnitude (a peak of 2e-5) is
    often over rtol and passes by the absolute floor alone: "max rel 0.0164 (within rtol 0.0001,
    atol 1e-06)" would read as a contradiction, so the line names the floor and the peak."""
    if error.max_abs <= tolerance.rtol * error.magnitude:
        return f"within rtol {tolerance.rtol:g}"
    return (f"over rtol {tolerance.rtol:g}, max abs within atol {tolerance.atol:g}: "
            f"the output's peak is only {error.magnitude:.3g}")
