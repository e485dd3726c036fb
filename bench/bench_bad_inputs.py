"""The bad-input corpus (tests/cli/corpus_*.py) run as a user would: each case in its own
``flexrt`` process with a 10 s limit, its peak memory measured; the outcomes counted (clear,
unclear, traceback, silent, hang: tests/cli/badinput.py's classes), per area and in all.

    python bench/bench_bad_inputs.py [--python PATH] [--only SUBSTRING] [--show KIND ...]

``--python`` runs the cases under another installation (e.g. an older checkout's venv, for the
counts before a change). Never part of the test run; ``tests/cli/test_bad_inputs.py`` checks the
same cases in-process.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.cli.badinput import all_cases, classify, materialize  # noqa: E402

CHILD = "import sys; from flexrt.cli import main; sys.exit(main(sys.argv[1:]))"
KINDS = ("clear", "unclear", "traceback", "silent", "hang")


def run_case(c, python: str, timeout_s: float) -> tuple[str, int, float, float, str]:
    """(outcome, exit status, seconds, peak MB, stderr) of one case in a child process."""
    with tempfile.TemporaryDirectory() as d:
        argv = materialize(c, Path(d))
        t0 = time.perf_counter()
        proc = subprocess.Popen([python, "-c", CHILD, *argv], cwd=d, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "FLEXRT_CACHE_DIR": d, "COLUMNS": "200"})
        try:
            _, err = proc.communicate(timeout=timeout_s)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            status = None
        seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far
    return classify(c, status, err), -1 if status is None else status, seconds, peak_mb, err


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter whose flexrt runs the cases")
    p.add_argument("--only", default="", help="only cases whose id contains this")
    p.add_argument("--show", nargs="*", default=["unclear", "traceback", "silent", "hang"],
                   help="print the cases with these outcomes")
    p.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args(argv)
    cases = [c for c in all_cases() if args.only in c.id]
    counts: dict = collections.Counter()
    by_area: dict = collections.defaultdict(collections.Counter)
    slowest = 0.0
    for c in cases:
        kind, status, seconds, peak, err = run_case(c, args.python, args.timeout)
        counts[kind] += 1
        by_area[c.id.split("-")[0]][kind] += 1
        slowest = max(slowest, seconds)
        if kind in args.show:
            last = (err.strip().splitlines() or [""])[-1][:300]
            print(f"{kind:<9} {c.id}: exit {status}, {seconds:.1f} s: {last}", flush=True)
    total = len(cases)
    print(f"\n{total} cases with {args.python}; slowest {slowest:.1f} s; largest child peak {peak:.0f} MB")
    print(f"{'area':<14}" + "".join(f"{k:>10}" for k in KINDS))
    for area, cnt in sorted(by_area.items()):
        print(f"{area:<14}" + "".join(f"{cnt[k]:>10}" for k in KINDS))
    print(f"{'all':<14}" + "".join(f"{counts[k]:>10}" for k in KINDS)
          + f"   clear {100 * counts['clear'] / max(1, total):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
