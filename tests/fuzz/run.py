"""Run the loader fuzzers: ``python -m tests.fuzz.run --format lite --count 100000`` (or ``make fuzz``).

Inputs are split into chunks, each run by a fresh worker process (:mod:`tests.fuzz.worker`),
``--jobs`` at a time. The parent enforces the per-input deadline: a worker that reports nothing
for ``--deadline`` seconds is killed, and the input it was on is run again alone in a fresh worker
(the machine may simply have been busy); if it then uses more than the deadline in CPU time
(or ten deadlines of wall time) it is a *hang*. A worker
that dies (signal, abort) is a *crash* at the input it was on. An exception that is not one of the
target's documented errors is an *exception* finding; ``MemoryError`` under the address-space cap
is a *memory* finding. The run continues after every finding, from the next input.

``--replay INDEX`` runs one input in this process and shows its traceback;
``--save DIR`` writes that input to a file. The report (``--report PATH``) is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LOADER_FORMATS = ("lite", "onnx", "mindir", "ckpt")
SURFACE_FORMATS = ("lite-path", "lite-run", "lite-cli")  # the .lite files through more than the loader
FORMATS = LOADER_FORMATS + SURFACE_FORMATS
STARTUP_TIMEOUT_S = 180.0  # imports and warm-up of a worker on a loaded machine


@dataclass
class Finding:
    format: str
    index: int
    kind: str  # "crash", "hang", "exception", "memory", "seed-invalid"
    detail: str


@dataclass
class FormatReport:
    format: str
    seed: int
    inputs: int = 0
    outcomes: Counter = field(default_factory=Counter)  # "ok" or the error class
    findings: list[Finding] = field(default_factory=list)
    slowest_ms: float = 0.0
    retried: int = 0  # inputs that passed the deadline once and finished in time when run alone
    peak_rss_kb: int = 0
    baseline_vm_kb: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields["outcomes"] = dict(self.outcomes.most_common())
        fields["findings"] = [asdict(finding) for finding in self.findings]
        return fields

    def summary(self) -> str:
        errors = ", ".join(f"{name} {count}" for name, count in self.outcomes.most_common())
        return (f"{self.format:7s} {self.inputs:7d} inputs  {len(self.findings)} findings  "
                f"slowest {self.slowest_ms:.0f} ms  peak RSS {self.peak_rss_kb // 1024} MiB  "
                f"{self.seconds:.1f} s  [{errors}]")


class _Worker:
    """A worker process and a line reader with a timeout on its stdout."""

    def __init__(self, fmt: str, seed: int, start: int, stop: int, memory_mb: int) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker; closed in close()
        environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1",
                       "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
        command = [sys.executable, "-m", "tests.fuzz.worker", "--format", fmt, "--seed", str(seed),
                   "--start", str(start), "--stop", str(stop), "--memory-mb", str(memory_mb)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL,
                                        cwd=REPO_ROOT, env=environment, bufsize=0)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.buffer = b""

    def line(self, timeout: float) -> str | None:
        """The next line; "" at end of stream; None when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.selector.select(remaining):
                return None
            chunk = os.read(self.process.stdout.fileno(), 65536)
            if not chunk:
                if self.buffer:
                    break
                return ""
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()

    def stderr_tail(self, size: int = 3000) -> str:
        self.stderr.seek(0, os.SEEK_END)
        end = self.stderr.tell()
        self.stderr.seek(max(0, end - size))
        return self.stderr.read().decode(errors="replace")

    def close(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait()
        self.selector.close()
        self.process.stdout.close()
        self.stderr.close()
        return code


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/PID/stat`` fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code}"


class _Chunk:
    """Inputs ``start..stop`` of one format, worker after worker until every input has an outcome."""

    def __init__(self, report: FormatReport, lock: threading.Lock, deadline: float, memory_mb: int) -> None:
        self.report = report
        self.lock = lock
        self.deadline = deadline
        self.memory_mb = memory_mb

    def record(self, index: int, elapsed_ms: float, outcome: str) -> None:
        with self.lock:
            self.report.inputs += 1
            self.report.slowest_ms = max(self.report.slowest_ms, elapsed_ms)
            if outcome == "ok":
                self.report.outcomes["ok"] += 1
            elif outcome.startswith(("E ", "O ")):
                self.report.outcomes[outcome[2:]] += 1
            else:
                detail = json.loads(outcome[2:])
                kind = "memory" if detail["error"].startswith("MemoryError") else "exception"
                self.report.outcomes[detail["error"].split(":")[0]] += 1
                self.report.findings.append(Finding(self.report.format, index, kind, json.dumps(detail)))

    def finding(self, index: int, kind: str, detail: str) -> None:
        with self.lock:
            self.report.inputs += 1
            self.report.outcomes[kind] += 1
            self.report.findings.append(Finding(self.report.format, index, kind, detail))

    def run(self, start: int, stop: int, alone: bool = False) -> str:
        """Run the inputs; returns "" or, with ``alone`` (one input), "hang"/"crash" if it failed."""
        index = start
        while index < stop:
            worker = _Worker(self.report.format, self.report.seed, index, stop, self.memory_mb)
            try:
                ready = worker.line(STARTUP_TIMEOUT_S)
                if not ready or not ready.startswith("ready "):
                    if ready and ready.startswith("seed-invalid"):
                        self.finding(index, "seed-invalid", ready)
                        return "crash"
                    raise RuntimeError(f"fuzz worker did not start ({ready!r}):\n{worker.stderr_tail()}")
                with self.lock:
                    self.report.baseline_vm_kb = max(self.report.baseline_vm_kb, int(ready.split()[1]))
                while index < stop:
                    line = self._next_line(worker) if alone else worker.line(self.deadline)
                    if line is None:  # the input at ``index`` ran past the deadline
                        worker.close()
                        if alone:
                            return "hang"
                        self._run_alone(index)
                        index += 1
                        break
                    if line == "":  # the worker died on the input at ``index``
                        code = worker.process.wait()
                        tail = worker.stderr_tail()
                        if alone:
                            return "crash"
                        self.finding(index, "crash", f"{_describe_exit(code)}\n{tail}")
                        index += 1
                        break
                    if line.startswith("done "):
                        with self.lock:
                            self.report.peak_rss_kb = max(self.report.peak_rss_kb, int(line.split()[1]))
                        break
                    number, elapsed, outcome = line.split(" ", 2)
                    self.record(int(number), float(elapsed), outcome)
                    index = int(number) + 1
                else:
                    done = worker.line(self.deadline)
                    if done and done.startswith("done "):
                        with self.lock:
                            self.report.peak_rss_kb = max(self.report.peak_rss_kb, int(done.split()[1]))
            finally:
                worker.close()
        return ""

    def _next_line(self, worker: _Worker) -> str | None:
        """The second chance counts the worker's CPU time, not wall time: on a busy machine an
        input may wait for a core, but only one that computes past the deadline is a hang (with a
        wall-clock backstop of ten deadlines for one that blocks)."""
        started_cpu, started_wall = _cpu_seconds(worker.process.pid), time.monotonic()
        while True:
            line = worker.line(0.1)
            if line is not None:
                return line
            used = _cpu_seconds(worker.process.pid) - started_cpu
            if used > self.deadline or time.monotonic() - started_wall > 10 * self.deadline:
                return None

    def _run_alone(self, index: int) -> str:
        """The second chance of an input that ran past the deadline, in a fresh idle worker."""
        with self.lock:
            self.report.retried += 1
        failure = self.run(index, index + 1, alone=True)
        if failure:
            self.finding(index, failure, f"ran past the {self.deadline:.1f} s deadline twice" if failure == "hang"
                         else "the worker died when the input ran alone")
        return failure


def fuzz(formats: list[str], count: int, seed: int = 0, jobs: int = 2, chunk: int = 5000, deadline: float = 2.0,
         memory_mb: int = 256, start: int = 0, log=None) -> dict[str, FormatReport]:
    """Run ``count`` inputs of each format (indices ``start..start+count``); return one report per format."""
    reports = {fmt: FormatReport(fmt, seed) for fmt in formats}
    locks = {fmt: threading.Lock() for fmt in formats}
    tasks = [(fmt, low, min(low + chunk, start + count)) for fmt in formats for low in range(start, start + count, chunk)]
    slots = threading.Semaphore(jobs)
    errors: list[BaseException] = []

    def work(fmt: str, low: int, high: int) -> None:
        with slots:
            began = time.monotonic()
            try:
                _Chunk(reports[fmt], locks[fmt], deadline, memory_mb).run(low, high)
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(err)
            with locks[fmt]:
                reports[fmt].seconds += time.monotonic() - began
            if log is not None:
                log(f"{fmt} {low}..{high} done in {time.monotonic() - began:.1f} s")

    threads = [threading.Thread(target=work, args=task, daemon=True) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return reports


def replay(fmt: str, seed: int, index: int, save: Path | None) -> int:
    """Run one input here, showing its outcome; optionally write it to ``save``."""
    from tests.fuzz.targets import TARGETS

    target = TARGETS[fmt]()
    chosen, data = target.generate(seed, index)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        path = save / f"{fmt}-{seed}-{index}.{fmt.split('-')[0]}"
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes, from seed {chosen.name!r})")
    started = time.perf_counter()
    try:
        label = target.run(data, chosen.options)
        print(f"{label or 'ok'} in {(time.perf_counter() - started) * 1000:.1f} ms")
    except target.expected as err:
        print(f"documented error {type(err).__name__} in {(time.perf_counter() - started) * 1000:.1f} ms: {err}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", action="append", choices=(*FORMATS, "all", "loaders", "surfaces"),
                        help="format to fuzz (repeatable; 'loaders' and 'surfaces' name the two groups; default all)")
    parser.add_argument("--count", type=int, default=100_000, help="inputs per format (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="run seed: the inputs are a function of (seed, index)")
    parser.add_argument("--start", type=int, default=0, help="first input index")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="worker processes at once")
    parser.add_argument("--chunk", type=int, default=5000, help="inputs per worker process")
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds per input before it counts as a hang")
    parser.add_argument("--memory-mb", type=int, default=256, help="address space a worker may add after warm-up")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run one input in this process")
    parser.add_argument("--save", type=Path, metavar="DIR", help="with --replay: write the input to DIR")
    args = parser.parse_args(argv)
    groups = {"all": FORMATS, "loaders": LOADER_FORMATS, "surfaces": SURFACE_FORMATS}
    named = [fmt for name in (args.format or ["all"]) for fmt in groups.get(name, (name,))]
    formats = list(dict.fromkeys(named))

    if args.replay is not None:
        return replay(formats[0], args.seed, args.replay, args.save)
    started = time.monotonic()
    reports = fuzz(formats, args.count, args.seed, args.jobs, args.chunk, args.deadline, args.memory_mb, args.start,
                   log=lambda text: print(text, file=sys.stderr, flush=True))
    print(f"fuzzed {', '.join(formats)}: {args.count} inputs each, seed {args.seed}, "
          f"{time.monotonic() - started:.1f} s wall")
    for report in reports.values():
        print(report.summary())
        for finding in report.findings[:20]:
            print(f"  {finding.kind} at index {finding.index}: {finding.detail[:300]}")
    if args.report is not None:
        args.report.write_text(json.dumps({fmt: r.to_json() for fmt, r in reports.items()}, indent=2))
    return 1 if any(r.findings for r in reports.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
