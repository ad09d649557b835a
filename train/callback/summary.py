"""``SummaryCollector``: loss, metrics and learning rate per step into CSV and JSON, plus a PNG
of the curves when matplotlib is installed (MindSpore's collector writes summary files for
MindInsight; these plain files serve the same purpose without a viewer)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from train.callback._callback import Callback, RunContext
from train.checkpoint import atomic_write


class SummaryCollector(Callback):
    """Record one row per ``collect_freq`` steps in ``summary_dir``: ``summary.csv``,
    ``summary.json`` and ``summary.png`` (the last only with matplotlib)."""

    def __init__(self, summary_dir: str | os.PathLike, collect_freq: int = 1, plot: bool = True) -> None:
        self.summary_dir = Path(summary_dir)
        self.collect_freq = max(int(collect_freq), 1)
        self.plot = plot
        self.rows: list[dict[str, Any]] = []

    def on_train_step_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        if params.cur_step_num % self.collect_freq:
            return
        row: dict[str, Any] = {
            "epoch": params.cur_epoch_num,
            "step": params.cur_step_num,
            "loss": float(params.net_outputs.asnumpy().mean()),
            "learning_rate": params.learning_rate,
        }
        row.update({f"train_{k}": v for k, v in params.train_metrics.items()})
        self.rows.append(row)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        params = run_context.original_args()
        if self.rows and params.eval_results:
            self.rows[-1].update({f"eval_{k}": v for k, v in params.eval_results.items()})

    def on_train_end(self, run_context: RunContext) -> None:
        self.write()

    def write(self) -> None:
        self.summary_dir.mkdir(parents=True, exist_ok=True)
        columns = list(dict.fromkeys(key for row in self.rows for key in row))
        lines = [",".join(columns)]
        for row in self.rows:
            lines.append(",".join("" if row.get(c) is None else repr(row[c]) for c in columns))
        atomic_write(self.summary_dir / "summary.csv", ("\n".join(lines) + "\n").encode())
        clean = [
            {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
            for row in self.rows
        ]
        atomic_write(self.summary_dir / "summary.json", json.dumps({"rows": clean}, indent=1).encode())
        if self.plot:
            self._plot(columns)

    def _plot(self, columns: list[str]) -> None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return  # optional: CSV and JSON are the record
        series = [c for c in columns if c not in ("epoch", "step")]
        figure, axes = plt.subplots(
            len(series), 1, figsize=(7, 2.2 * len(series)), sharex=True, squeeze=False
        )
        steps = [row["step"] for row in self.rows]
        for axis, name in zip(axes[:, 0], series):
            points = [(s, row[name]) for s, row in zip(steps, self.rows) if row.get(name) is not None]
            axis.plot(
                [p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 50 else None
            )
            axis.set_ylabel(name)
        axes[-1, 0].set_xlabel("step")
        figure.tight_layout()
        figure.savefig(self.summary_dir / "summary.png")
        plt.close(figure)
