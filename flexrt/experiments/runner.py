"""Running an experiment into a results folder, resumably.

The folder holds ``results.jsonl`` (one JSON line per finished run: its key, inputs, status, every
metric, convergence curves, the flexrt version and commit, the host, wall time), ``strategies/``
(each found strategy, ``KEY.json``), ``report.md`` and ``plots/*.png``. A run's line is appended as
soon as it finishes, so an interrupted experiment (Ctrl-C) loses nothing that had finished.

The convention for a folder that already holds results: ``resume=True`` keeps them and runs only
the runs whose key (:func:`~flexrt.experiments.schema.run_key`, a hash of the inputs and the
flexrt version) has no ``ok`` or ``skipped`` line there; without it the run is refused with a
message naming both ways out (``--resume``, or another ``--output``). Failed runs are written too
(status ``failed`` with the error) and run again on resume.

Entry points: :func:`run_experiment`, :func:`load_results`, :func:`default_output`.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from flexrt import __version__
from flexrt.errors import ConfigError, FlexrtError
from flexrt.experiments.kinds import Outcome, SkipRun, kind
from flexrt.experiments.schema import Experiment, Run
from flexrt.inputs import clip, parse_json, read_text, writable_folder

RESULTS = "results.jsonl"
DONE = ("ok", "skipped")


@dataclass
class Summary:
    """What one call of :func:`run_experiment` did."""

    output: Path
    computed: list[str] = field(default_factory=list)    # keys run now
    cached: list[str] = field(default_factory=list)      # keys found finished in the folder
    failed: list[tuple[str, str]] = field(default_factory=list)   # (key, error)
    report: Optional[Path] = None


def default_output(exp: Experiment) -> Path:
    """``results/NAME`` (``results/NAME-quick`` for the quick variant) under the working directory."""
    return Path("results") / (exp.name if exp.variant == "full" else f"{exp.name}-{exp.variant}")


def load_results(path: Path) -> list[dict]:
    """The rows of a ``results.jsonl`` (a last line cut short by a crash is skipped: it had not
    finished; any other line that is not a JSON object is refused, with its line)."""
    if not os.path.lexists(path):
        return []
    rows, lines = [], read_text(path, "results file").splitlines()   # a folder there is refused by name
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _cut_short(lines, i):
            continue
        row = parse_json(line, str(path), line=i + 1)
        if not isinstance(row, dict) or "key" not in row:
            raise ConfigError(f"{path}:{i + 1}: not a result row of flexrt run (a JSON object with a key); "
                              f"was this file written by flexrt?")
        rows.append(row)
    return rows


def _cut_short(lines: list, i: int) -> bool:
    """Whether line ``i`` is the last, begun as a row and cut short (the process died writing it)."""
    if i != len(lines) - 1 or not lines[i].lstrip().startswith("{"):
        return False
    try:
        json.loads(lines[i])
    except ValueError:
        return True
    return False


def _drop_cut_line(results: Path) -> None:
    """Before appending to ``results``: drop a last line cut short, so that the rows added after it
    are not read as following a broken line."""
    if not results.is_file():
        return
    lines = read_text(results, "results file").splitlines()
    if lines and _cut_short(lines, len(lines) - 1):
        results.write_text("".join(line + "\n" for line in lines[:-1]), encoding="utf-8")


_COMMIT: Optional[dict] = None


def provenance() -> dict:
    """flexrt's version and, where the package lies in a git checkout, its commit and whether it is dirty."""
    global _COMMIT
    if _COMMIT is None:
        root = Path(__file__).resolve().parents[2]
        commit, dirty = None, None
        try:
            commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=10).stdout.strip() or None
            if commit:
                dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "-uno"],
                                            capture_output=True, text=True, timeout=20).stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
        _COMMIT = {"version": __version__, "commit": commit, "dirty": dirty}
    return _COMMIT


def host() -> dict:
    import numpy
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
            "numpy": numpy.__version__, "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}


class _WatchInterrupt:
    """Notes a Ctrl-C during a run: the searches catch KeyboardInterrupt and return their best so far,
    which must not be recorded as the run's result."""

    def __init__(self) -> None:
        self.seen, self.old = False, None

    def _handler(self, signum, frame):
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        return False


def execute(kind_name: str, inputs: dict) -> tuple[str, Any, float]:
    """Run one run (in this process or a worker): (status, Outcome or the error/skip reason, wall seconds).
    A Ctrl-C during the run raises KeyboardInterrupt, even where the run's search caught it."""
    t0 = time.perf_counter()
    try:
        with _WatchInterrupt() as watch:
            outcome = kind(kind_name).fn(inputs)
        if watch.seen:
            raise KeyboardInterrupt
        if not isinstance(outcome, Outcome):
            raise TypeError(f"run kind {kind_name!r} returned {type(outcome).__name__}, not an Outcome")
        return "ok", outcome, time.perf_counter() - t0
    except SkipRun as e:
        return "skipped", str(e), time.perf_counter() - t0
    except FlexrtError as e:
        return "failed", clip(f"{type(e).__name__}: {e}", 2000), time.perf_counter() - t0
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # a bug in a runner: recorded, the other runs go on
        return "failed", clip(f"internal error: {type(e).__name__}: {e}", 2000), time.perf_counter() - t0


def _row(exp: Experiment, run: Run, status: str, result: Any, wall_s: float, out: Path) -> dict:
    row = {"key": run.key, "experiment": exp.name, "variant": exp.variant, "kind": run.kind, "inputs": run.params,
           "status": status, "seed": run.params.get("seed"), "wall_s": wall_s,
           "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "flexrt": provenance(), "host": host(),
           "metrics": {}, "convergence": {}, "strategy_file": None, "reason": None}
    if status == "ok":
        row["metrics"], row["convergence"] = result.metrics, result.convergence
        if result.strategy is not None:
            path = out / "strategies" / f"{run.key}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result.strategy, indent=1), encoding="utf-8")
            row["strategy_file"] = str(path.relative_to(out))
    else:
        row["reason"] = result
    return row


def _append(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True, allow_nan=False, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _progress(total: int, label: str, enabled: bool):
    from tqdm import tqdm  # a dependency of flexrt (pyproject.toml)
    return tqdm(total=total, desc=label, unit="run", file=sys.stderr, disable=not enabled, leave=True)


def _results(pending: list[Run], jobs: int) -> Iterable[tuple[Run, tuple]]:
    """(run, execute's answer) as each run finishes: in this process, or ``jobs`` worker processes."""
    if jobs <= 1:
        for run in pending:
            yield run, execute(run.kind, run.params)
        return
    pool = ProcessPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(execute, run.kind, run.params): run for run in pending}
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for f in done:
                yield futures.pop(f), f.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def run_experiment(exp: Experiment, output: Path, resume: bool = False, jobs: int = 1, progress: bool = False,
                   report: bool = True, on_row: Optional[Callable[[dict], None]] = None) -> Summary:
    """Run every run of ``exp`` not yet finished in ``output``, appending a line per run, then write
    the report and plots. Raises ConfigError where ``output`` already holds results and ``resume`` is
    off (module doc)."""
    output = writable_folder(output, "--output")
    results = output / RESULTS
    rows = load_results(results)
    if rows and not resume:
        raise ConfigError(f"{output} already holds the results of {len(rows)} runs ({results}); pass --resume to "
                          f"keep them and run only what is missing, or give another --output (or delete the folder "
                          f"to start over)")
    others = sorted({str(r.get("experiment")) for r in rows} - {exp.name})
    if others:
        raise ConfigError(f"{output} holds the results of experiment {', '.join(map(repr, others))}, not "
                          f"{exp.name!r}; give another --output to run {exp.name!r}")
    _check_entries(output, exp)
    output.mkdir(parents=True, exist_ok=True)
    _drop_cut_line(results)
    done = {r["key"] for r in rows if r.get("status") in DONE}
    summary = Summary(output, cached=[r.key for r in exp.runs if r.key in done])
    pending = [r for r in exp.runs if r.key not in done]
    bar = _progress(len(exp.runs), exp.name, progress)
    bar.update(len(exp.runs) - len(pending))
    try:
        for run, (status, result, wall_s) in _results(pending, jobs):
            row = _row(exp, run, status, result, wall_s, output)
            _append(results, row)
            summary.computed.append(run.key)
            if status == "failed":
                summary.failed.append((run.key, result))
            if on_row is not None:
                on_row(row)
            bar.update(1)
    except KeyboardInterrupt:
        if report:   # the report of what finished, then stop as asked
            _report(exp, results, output, summary)
        raise
    finally:
        bar.close()
    if report:
        _report(exp, results, output, summary)
    return summary


def _check_entries(output: Path, exp: Experiment) -> None:
    """Refuse, before any run, an entry of ``output`` that the runs and the report cannot write: a
    file where a folder goes (strategies/, plots/) or a folder where a file goes (report.md, a run's
    strategies/KEY.json)."""
    folders = [output / "strategies", output / "plots"]
    files = [output / "report.md"] + [output / "strategies" / f"{run.key}.json" for run in exp.runs]
    for path in folders:
        if os.path.lexists(path) and not path.is_dir():
            raise ConfigError(f"--output {output}: {path} is not a folder, and the experiment writes its "
                              f"{path.name} there; move it away or give another --output")
    for path in files:
        if os.path.lexists(path) and (path.is_dir() or not path.is_file()):
            raise ConfigError(f"--output {output}: {path} is not a regular file, and the experiment writes it; move "
                              f"it away or give another --output")


def _report(exp: Experiment, results: Path, output: Path, summary: Summary) -> None:
    from flexrt.experiments.report import write_report
    summary.report = write_report(exp, load_results(results), output)
